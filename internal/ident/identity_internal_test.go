package ident

import (
	"fmt"
	"testing"

	"github.com/quorumlock/quorumlock/transport"
)

// An error reply to the probe is final (the master is not asked again)
// only when it refuses INFO; one a server sends only for a while (a
// script running, a data set loading) leaves the master to be asked
// again, as one that did not answer.
func TestProbeAnswerResult_errorReplies(t *testing.T) {
	for _, tc := range []struct {
		msg   string
		final bool
	}{
		{"NOPERM this user has no permissions to run the 'info' command", true},
		{"ERR unknown command 'INFO', with args beginning with: 'server' ", true},
		{"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", false},
		{"LOADING Redis is loading the dataset in memory", false},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", false},
		{"TRYAGAIN Multiple keys request during rehashing of slot", false},
		{"CLUSTERDOWN The cluster is down", false},
		{"ERR max number of clients reached", false},
		{"BUSYGROUP Consumer Group name already exists", true},
	} {
		r := probeAnswerResult(nil, fmt.Errorf("master 0: %w", transport.ReplyError(tc.msg)))
		if r.final != tc.final || r.runID != "" {
			t.Errorf("%q: %+v, want final %v and no run_id", tc.msg, r, tc.final)
		}
	}
}
