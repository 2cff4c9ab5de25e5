// Package inspect reads what one master holds for a key, for the core's
// Client.Inspect and Client.InspectHolder: Read runs layout.Reader's
// commands until it has the key's whole state, ReadHolder reads a plain
// lock's holder in one script step. Each reads through the master's
// transport.Inspector within a per-master timeout and the caller's ctx,
// and checks the untrusted replies.
//
// It reads one master and knows nothing of the Client: reading every
// master at once, naming the master in a failure and refusing a closed
// client stay in the core. It never writes to a master.
package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/transport"
)

// Read reads what the master behind in holds for key (layout.State), in
// as many round trips as layout.Reader asks, each within timeout and ctx.
// It returns the state, how long the first round trip took, and the first
// error: ctx's, the transport's, a count of replies that does not match
// the commands, or the reader's (layout.ErrMalformed). On an error the
// state is the zero State.
func Read(ctx context.Context, in transport.Inspector, key string, timeout time.Duration) (st layout.State, rtt time.Duration, err error) {
	r := layout.NewReader(key)
	for first := true; ; first = false {
		cmds := r.Next()
		if cmds == nil {
			break
		}
		if err := ctx.Err(); err != nil {
			return st, rtt, err
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, timeout)
		replies, err := in.Inspect(rctx, cmds)
		cancel()
		if first {
			rtt = time.Since(start)
		}
		if err == nil && len(replies) != len(cmds) {
			err = fmt.Errorf("inspection: %d replies to %d commands", len(replies), len(cmds))
		}
		if err != nil {
			return st, rtt, err
		}
		if err := r.Feed(replies); err != nil {
			return st, rtt, err
		}
	}
	return r.State(), rtt, nil
}
