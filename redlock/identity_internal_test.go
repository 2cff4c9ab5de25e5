package redlock

import (
	"fmt"
	"strings"
	"testing"
)

// The INFO server reply is untrusted: only a run_id of 40 lowercase hex
// digits, in a reply of bounded size, identifies a master.
func TestRunID_untrustedReplies(t *testing.T) {
	good := strings.Repeat("0123456789abcdef", 3)[:40]
	for name, tc := range map[string]struct {
		reply any
		want  string
	}{
		"a server's":          {[]byte("# Server\r\nredis_version:7.0.15\r\nrun_id:" + good + "\r\ntcp_port:6379\r\n"), good},
		"last line":           {[]byte("run_id:" + good), good},
		"too short":           {[]byte("run_id:" + good[:39] + "\r\n"), ""},
		"too long":            {[]byte("run_id:" + good + "0\r\n"), ""},
		"upper case":          {[]byte("run_id:" + strings.ToUpper(good) + "\r\n"), ""},
		"escape sequence":     {[]byte("run_id:" + good[:38] + "\x1b[\r\n"), ""},
		"none":                {[]byte("# Server\r\nredis_version:7.0.15\r\n"), ""},
		"a string (go-redis)": {"# Server\r\nrun_id:" + good + "\r\n", good},
		"oversized string":    {"run_id:" + good + "\r\n" + strings.Repeat("x", maxInfoReply), ""},
		"not a bulk string":   {int64(1), ""},
		"an array":            {[]any{[]byte("run_id:" + good)}, ""},
		"an error reply":      {ReplyError("NOPERM this user has no permissions to run the 'info' command"), ""},
		"nil":                 {nil, ""},
		"oversized":           {[]byte("run_id:" + good + "\r\n" + strings.Repeat("x", maxInfoReply)), ""},
	} {
		if got := runID(tc.reply); got != tc.want {
			t.Errorf("%s: runID = %q, want %q", name, got, tc.want)
		}
	}
}

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
		r := probeAnswerResult(nil, fmt.Errorf("master 0: %w", ReplyError(tc.msg)))
		if r.final != tc.final || r.runID != "" {
			t.Errorf("%q: %+v, want final %v and no run_id", tc.msg, r, tc.final)
		}
	}
}
