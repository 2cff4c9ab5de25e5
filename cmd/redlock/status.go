package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// cmdStatus shows, per key and master, what the master holds, as
// redlock's Client.Inspect reads it (package layout describes it).
func cmdStatus(ctx context.Context, e *env, keys []string) int {
	if len(keys) == 0 {
		fmt.Fprintln(e.stderr, "usage: redlock status KEY...")
		return exitUsage
	}
	c := e.client
	if e.timeout < statusTimeout {
		// A look at the masters is no lock round: give each round trip
		// more time than a lock's per-master timeout.
		var err error
		if c, err = redlock.New(e.poolList(), redlock.WithTimeout(statusTimeout)); err != nil {
			printErr(e.stderr, err)
			return exitUsage
		}
		defer c.Close()
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	code := exitOK
	for _, key := range keys {
		in, err := c.Inspect(ctx, key)
		if err != nil {
			tw.Flush()
			printErr(e.stderr, errors.New(display(err.Error())))
			return failCode(err)
		}
		fmt.Fprintf(tw, "%s\n", display(key))
		fmt.Fprintln(tw, "  master\treachable\tkind\tholder\tttl\tfence\t")
		holders := map[string]int{}
		up := 0
		for _, m := range in.Masters {
			p := e.pools[m.Index]
			if m.Err != nil {
				fmt.Fprintf(tw, "  %s\tno: %s\t\t\t\t\t\n", display(m.Addr), display(p.RedactError(m.Err).Error()))
				code = exitUnavailable
				continue
			}
			st := describe(m.State, p)
			up++
			holders[st.holder]++
			fmt.Fprintf(tw, "  %s\tyes (%v)\t%s\t%s\t%s\t%s\t\n", display(m.Addr), m.RTT.Round(10*time.Microsecond),
				st.kind, orDash(st.holder), st.ttl, orDash(st.fence))
		}
		quorum := len(in.Masters)/2 + 1
		verdict := fmt.Sprintf("  free on a quorum (%d of %d masters answered)", up, len(in.Masters))
		for h, n := range holders {
			if h != "" && n >= quorum {
				verdict = fmt.Sprintf("  held by %s on %d of %d masters (quorum %d)", h, n, len(in.Masters), quorum)
			}
		}
		if up < quorum {
			verdict = fmt.Sprintf("  unknown: only %d of %d masters answered (quorum %d)", up, len(in.Masters), quorum)
		}
		fmt.Fprintln(tw, verdict)
	}
	tw.Flush()
	return code
}

// statusTimeout is the least time status gives each round trip to a
// master.
const statusTimeout = time.Second

// status is one master's row, ready to print: every string from the
// master redacted and escaped.
type status struct {
	kind   string // free, lock, reentrant, read-write, not a lock (TYPE)
	holder string
	ttl    string
	fence  string
}

// describe turns what a master holds into a row. Every string the master
// sent has the pool's credentials removed (a hostile master can echo them
// anywhere) before it is cut short and escaped.
func describe(st layout.State, p *pool.RedisPool) status {
	show := func(s string) string { return short(p.Redact(s)) }
	var row status
	switch st.Kind {
	case layout.KindFree:
		row.kind = "free"
	case layout.KindLock:
		row.kind, row.holder = "lock", show(st.Holders[0].Token)
	case layout.KindReentrant:
		owners := make([]string, len(st.Holders))
		for i, h := range st.Holders {
			owners[i] = display(p.Redact(h.Token)) + "×" + strconv.FormatInt(h.Count, 10) // owner×holds
		}
		row.kind, row.holder = "reentrant", strings.Join(owners, ",")
	case layout.KindReadWrite:
		row.kind = "read-write"
		if len(st.Holders) > 0 && st.Holders[0].Mode == layout.ModeWrite {
			row.holder = "writer " + show(st.Holders[0].Token)
			break
		}
		row.holder = strconv.Itoa(len(st.Holders)) + " readers"
		if st.Intent != nil {
			row.holder += ", writer waiting " + show(st.Intent.Writer)
		}
	default:
		row.kind = "not a lock (" + display(p.Redact(st.Type)) + ")"
	}
	switch {
	case st.Kind == layout.KindFree:
	case st.TTL == layout.NoExpiry:
		row.ttl = "none"
	default:
		row.ttl = st.TTL.String()
	}
	if st.Fenced {
		row.fence = strconv.FormatUint(st.Fence, 10)
	}
	return row
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// short shows the start of a token, escaped: enough to tell holders apart.
func short(tok string) string {
	if len(tok) > 8 {
		return display(tok[:8]) + "…"
	}
	return display(tok)
}

// display returns s as it is when it is plain printable text, else quoted
// with Go escapes: a key or a reply that carries terminal escape
// sequences, tabs or newlines cannot act on the terminal or shift the
// table.
func display(s string) string {
	plain := utf8.ValidString(s) && !strings.HasPrefix(s, `"`)
	for _, r := range s {
		if !plain {
			break
		}
		plain = unicode.IsPrint(r)
	}
	if plain {
		return s
	}
	return strconv.Quote(s)
}

// poolList returns the masters' pools as redlock.New takes them.
func (e *env) poolList() []pool.Pool {
	ps := make([]pool.Pool, len(e.pools))
	for i, p := range e.pools {
		ps[i] = p
	}
	return ps
}
