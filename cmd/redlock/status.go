package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// cmdStatus shows, per key and master, what the master holds.
func cmdStatus(ctx context.Context, e *env, keys []string) int {
	if len(keys) == 0 {
		fmt.Fprintln(e.stderr, "usage: redlock status KEY...")
		return exitUsage
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	code := exitOK
	for _, key := range keys {
		fmt.Fprintf(tw, "%s\n", key)
		fmt.Fprintln(tw, "  master\treachable\tkind\tholder\tttl\tfence\t")
		holders := map[string]int{}
		up := 0
		for _, p := range e.pools {
			st, err := keyStatus(ctx, p, key, e.timeout)
			st, err = st.redacted(p), p.RedactError(err)
			if err != nil {
				fmt.Fprintf(tw, "  %s\tno: %v\t\t\t\t\t\n", p.Addr(), err)
				code = exitUnavailable
				continue
			}
			up++
			holders[st.holder]++
			fmt.Fprintf(tw, "  %s\tyes (%v)\t%s\t%s\t%s\t%s\t\n", p.Addr(), st.rtt.Round(10*time.Microsecond), st.kind, orDash(st.holder), st.ttl, orDash(st.fence))
		}
		quorum := len(e.pools)/2 + 1
		verdict := fmt.Sprintf("  free on a quorum (%d of %d masters answered)", up, len(e.pools))
		for h, n := range holders {
			if h != "" && n >= quorum {
				verdict = fmt.Sprintf("  held by %s on %d of %d masters (quorum %d)", h, n, len(e.pools), quorum)
			}
		}
		if up < quorum {
			verdict = fmt.Sprintf("  unknown: only %d of %d masters answered (quorum %d)", up, len(e.pools), quorum)
		}
		fmt.Fprintln(tw, verdict)
	}
	tw.Flush()
	return code
}

type status struct {
	rtt    time.Duration
	kind   string // free, lock, reentrant, read-write
	holder string
	ttl    string
	fence  string
}

// redacted returns st with the pool's credentials removed from what the
// master sent (a hostile master can echo them anywhere).
func (st status) redacted(p *pool.RedisPool) status {
	st.kind, st.holder, st.ttl, st.fence = p.Redact(st.kind), p.Redact(st.holder), p.Redact(st.ttl), p.Redact(st.fence)
	return st
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// short shows the start of a token: enough to tell holders apart.
func short(tok string) string {
	if len(tok) > 8 {
		return tok[:8] + "…"
	}
	return tok
}

func keyStatus(ctx context.Context, p *pool.RedisPool, key string, timeout time.Duration) (status, error) {
	var st status
	ctx, cancel := context.WithTimeout(ctx, max(timeout, time.Second))
	defer cancel()
	c, err := p.GetContext(ctx)
	if err != nil {
		return st, err
	}
	defer c.Close()
	do := func(cmd string, args ...any) (any, error) {
		return redis.DoContext(c, ctx, cmd, args...)
	}
	start := time.Now()
	typ, err := redis.String(do("TYPE", key))
	if err != nil {
		return st, err
	}
	st.rtt = time.Since(start)
	switch typ {
	case "none":
		st.kind = "free"
	case "string":
		st.kind = "lock"
		tok, err := redis.String(do("GET", key))
		if err != nil {
			return st, err
		}
		st.holder = short(p.Redact(tok)) // before short cuts a secret to a prefix
	case "hash":
		fields, err := redis.StringMap(do("HGETALL", key))
		if err != nil {
			return st, err
		}
		clean := make(map[string]string, len(fields))
		for f, v := range fields {
			clean[p.Redact(f)] = p.Redact(v)
		}
		st.kind, st.holder = describeHash(clean)
	default:
		st.kind = "not a lock (" + typ + ")"
	}
	if typ != "none" {
		ms, err := redis.Int64(do("PTTL", key))
		if err != nil {
			return st, err
		}
		st.ttl = describeTTL(ms)
	}
	fence, err := redis.String(do("GET", redlock.FenceKey(key)))
	if err != nil && !errors.Is(err, redis.ErrNil) {
		return st, err
	}
	st.fence = fence
	return st, nil
}

func describeTTL(ms int64) string {
	switch {
	case ms == -1:
		return "none"
	case ms < 0:
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// describeHash tells a reentrant lock (owner -> count) from a read-write
// lock (r:/w: entries and a writer's intent).
func describeHash(fields map[string]string) (kind, holder string) {
	var readers, writers, owners []string
	intent := ""
	for f, v := range fields {
		switch {
		case strings.HasPrefix(f, "r:"):
			readers = append(readers, short(f[2:]))
		case strings.HasPrefix(f, "w:"):
			writers = append(writers, short(f[2:]))
		case f == "intent":
			intent = short(v)
		case f == "intent:exp":
		default:
			owners = append(owners, fmt.Sprintf("%s×%s", f, v))
		}
	}
	sort.Strings(readers)
	sort.Strings(owners)
	switch {
	case len(owners) > 0:
		return "reentrant", strings.Join(owners, ",") // owner×holds
	case len(writers) > 0:
		return "read-write", "writer " + strings.Join(writers, ",")
	default:
		h := fmt.Sprintf("%d readers", len(readers))
		if intent != "" {
			h += ", writer waiting " + intent
		}
		return "read-write", h
	}
}
