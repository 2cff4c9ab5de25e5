package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
)

// checkACL runs, on a probe key beside key (in its hash slot, covered by
// the key patterns that cover key's companions), what locks send: a plain
// acquisition, the scripts of extension (also a minimum hold), heal (with
// a fencing counter and metadata) and release (its notice on key's
// release channel), and the reads of metadata and status. Each refusal
// (NOPERM) is a problem naming what the user lacks; docs/operations.md
// ("The ACL a lock user needs") lists the rules. The probe keys are
// deleted again and expire within seconds if that fails.
func checkACL(r *report, c redis.Conn, timeout time.Duration, key string) {
	probe := keys.Companion(key, ":doctor-probe")
	fence, meta := keys.Companion(key, ":doctor-probe-fence"), keys.Companion(key, ":doctor-probe-meta")
	const tok = "redlock-doctor"
	type step struct {
		what string
		run  func() error
	}
	do := func(cmd string, args ...any) func() error {
		return func() error { _, err := redis.DoWithTimeout(c, timeout, cmd, args...); return err }
	}
	script := func(s *scripts.Script, args ...any) func() error {
		return func() error { _, err := redigot.Do(s, c, timeout, args...); return err }
	}
	steps := []step{
		{"SET NX PX (a plain acquisition)", do("SET", probe, tok, "NX", "PX", 5000)},
		{"GET", do("GET", probe)},
		{"PTTL (holder metadata)", do("PTTL", probe)},
		{"the extension script (extend, auto-extend, a minimum hold)", script(scripts.Extend, probe, tok, 5000)},
		{"the release script (DEL, PUBLISH of the release notice)", script(scripts.Release, probe, tok, "quorumlock:released:"+key)},
		{"the heal script (SET, HSET, PEXPIRE of the counter and metadata)", script(scripts.Heal, probe, fence, meta, tok, 5000, "1", "1", "x")},
		{"HGETALL (status, metadata)", do("HGETALL", meta)},
		{"DEL", do("DEL", probe, fence, meta)},
	}
	var refused []string
	for _, s := range steps {
		err := s.run()
		if err == nil {
			continue
		}
		msg := err.Error()
		// A command refused inside a script is reported by line (Redis
		// 7.0): not NOPERM, "can't run this command".
		if !strings.Contains(msg, "NOPERM") && !strings.Contains(msg, "can't run this command") {
			r.Warnings = append(r.Warnings, fmt.Sprintf("ACL check on %s: %s: %s", display(probe), s.what, display(msg)))
			continue
		}
		refused = append(refused, s.what+" ("+display(scripts.Explain(err, msg).Error())+")")
	}
	if len(refused) > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("the ACL refuses, on %s: %s; see docs/operations.md, \"The ACL a lock user needs\"",
			display(probe), strings.Join(refused, "; ")))
	}
}

// lockCopies is, with --key, how many masters hold the key's lock: a
// lock missing on masters that answered (restarted or flushed) tolerates
// fewer failures than the masters' health says, until its holder's next
// extension puts it back (docs/design.md, "Locks that heal"). The "lock"
// object of doctor --json.
type lockCopies struct {
	Key       string `json:"key"`
	HeldOn    int    `json:"held_on"`    // masters holding the most-held token
	MissingOn int    `json:"missing_on"` // masters that answered and hold nothing there
	Tolerates int    `json:"tolerates"`  // held_on − quorum; negative: not held on a quorum
	Text      string `json:"text"`
}

// copiesOf reads key on every master (Client.Inspect) and counts the
// copies of its plain lock; nil when it cannot be read or is no plain
// lock (then there is nothing to say).
func copiesOf(ctx context.Context, e *env, key string) *lockCopies {
	c, err := e.newClient(max(e.timeout, time.Second))
	if err != nil {
		return nil
	}
	defer c.Close()
	in, err := c.Inspect(ctx, key)
	if err != nil {
		return nil
	}
	tokens := map[string]int{}
	free := 0
	for _, m := range in.Masters {
		switch {
		case m.Err != nil:
		case m.State.Kind == layout.KindFree:
			free++
		case m.State.Kind == layout.KindLock:
			tokens[m.State.Holders[0].Token]++
		}
	}
	lc := &lockCopies{Key: key, MissingOn: free}
	for _, n := range tokens {
		lc.HeldOn = max(lc.HeldOn, n)
	}
	if lc.HeldOn == 0 {
		return nil
	}
	quorum := len(in.Masters)/2 + 1
	lc.Tolerates = lc.HeldOn - quorum
	lc.Text = fmt.Sprintf("lock %s held on %d of %d masters", display(key), lc.HeldOn, len(in.Masters))
	if lc.MissingOn > 0 {
		lc.Text += fmt.Sprintf(", missing on %d that answered (restarted or flushed; its next extension puts it back)", lc.MissingOn)
	}
	if lc.Tolerates >= 0 {
		lc.Text += "; it tolerates " + plural(lc.Tolerates, "more failure")
	} else {
		lc.Text += fmt.Sprintf("; not on a quorum of %d", quorum)
	}
	return lc
}
