package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	keyslot "github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// statusLine is status's usage line and description: status.go parses its
// own arguments.
const statusLine = `usage: redlock status [--json] [--permits K] [--] KEY...

per key and master: reachable, kind, holder, remaining TTL, fence counter,
holds; then whether the key is held on a quorum, free on one, or unknown.
Masters that did not answer are named once, below the tables: a master
that fails (did not answer in time, refused the connection) costs the first
key at most one wait of 1s (or --timeout, if longer) and 100ms: the read,
beside the client's identity check at first contact. It is skipped for the
keys after.

exit codes:
  0   a quorum of the masters answered for every key (a master that did not
      is a warning, printed below the tables and on stderr)
  69  for some key fewer than a quorum answered: its state is unknown
  64  bad usage

A member that is a Redis Cluster (cluster://HOST:PORT[+HOST:PORT...]) is
read on the node that owns the key's slot (CLUSTER SLOTS from a seed; a
MOVED reply is followed once); the row names the slot and the node.

With --permits K each KEY is a semaphore of K permits (redlock exec
--permits): its K slots are shown as keys, then how many permits are held
and by whom.

--json prints one JSON object instead (fields: docs/operations.md).`

// parseStatus parses status's arguments.
func parseStatus(args []string) (runner, error) {
	fs := statusFlags()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	keys := fs.Args()
	if len(keys) == 0 {
		return nil, usageError{"status needs at least one KEY"}
	}
	for _, k := range keys {
		if k == "" {
			return nil, usageError{"an empty KEY"}
		}
	}
	asJSON := fs.Lookup("json").Value.(flag.Getter).Get().(bool)
	permits := fs.Lookup("permits").Value.(flag.Getter).Get().(int)
	if permits < 0 || permits > redlock.MaxPermits {
		return nil, usageError{fmt.Sprintf("--permits must be 1 to %d, got %d", redlock.MaxPermits, permits)}
	}
	return func(ctx context.Context, e *env) int { return cmdStatus(ctx, e, keys, permits, asJSON) }, nil
}

// semaphoreSlots returns the slot keys of the semaphores sems of permits
// permits, in order.
func semaphoreSlots(sems []string, permits int) []string {
	var keys []string
	for _, s := range sems {
		for i := 0; i < permits; i++ {
			keys = append(keys, layout.PermitKey(s, i))
		}
	}
	return keys
}

// statusSemaphore is one semaphore of status --json's "semaphores".
type statusSemaphore struct {
	Key     string   `json:"key"`
	Permits int      `json:"permits"`
	Held    int      `json:"held"`    // slots held on a quorum
	Unknown int      `json:"unknown"` // slots whose state is unknown or split
	Holders []string `json:"holders"` // per slot: the holder's token, "" when free

	text []string // per slot: the holder as the table shows it
}

// semaphores sums up the slots of each semaphore, from status's keys.
func semaphores(sems []string, permits int, out []statusKey) []statusSemaphore {
	var res []statusSemaphore
	for j, s := range sems {
		ss := statusSemaphore{Key: s, Permits: permits, Holders: make([]string, permits), text: make([]string, permits)}
		for i, sk := range out[j*permits : (j+1)*permits] {
			switch sk.Verdict {
			case "held":
				ss.Held++
				ss.Holders[i], ss.text[i] = sk.Holder, sk.text
			case "free":
			default:
				ss.Unknown++
			}
		}
		res = append(res, ss)
	}
	return res
}

func statusFlags() *flag.FlagSet {
	fs := newFlagSet("status")
	fs.Bool("json", false, "print one JSON object instead of text")
	fs.Int("permits", 0, "each KEY is a semaphore of this many permits: show its slots and the permits held")
	return fs
}

func statusUsage() string { return flagUsage(statusFlags(), statusLine) }

// statusMaster is one master of status --json's "masters": keep the
// names stable, docs/operations.md lists them.
type statusMaster struct {
	Addr     string `json:"address"`
	Answered bool   `json:"answered"` // answered for every key
	Error    string `json:"error,omitempty"`
	// SkippedKeys are the keys it was not asked about because it had
	// failed already.
	SkippedKeys int `json:"skipped_keys"`
}

// statusKey is one key of status --json's "keys".
type statusKey struct {
	Key     string `json:"key"`
	Verdict string `json:"verdict"` // "held", "free", "split" or "unknown"
	Holder  string `json:"holder,omitempty"`
	Meta    string `json:"holder_metadata,omitempty"` // the holder's, on the masters that hold it
	HeldOn  int    `json:"held_on"`
	// MissingOn counts, for a held key, the masters that answered and
	// hold nothing there: copies a restart or flush lost, which the
	// holder's next extension puts back.
	MissingOn int            `json:"missing_on"`
	Answered  int            `json:"answered"`
	Quorum    int            `json:"quorum"`
	Masters   []statusOnHost `json:"masters"`

	text string // the holder as the table shows it
}

// statusOnHost is what one master holds for one key.
type statusOnHost struct {
	Addr        string         `json:"address"`
	Node        string         `json:"cluster_node,omitempty"` // a cluster member's node that owns the key's slot
	Slot        *int           `json:"slot,omitempty"`         // the key's hash slot, for a cluster member
	Answered    bool           `json:"answered"`
	Error       string         `json:"error,omitempty"` // this key's failure; a down master's is in "masters"
	RoundTripUS int64          `json:"round_trip_us,omitempty"`
	Kind        string         `json:"kind,omitempty"` // free, lock, reentrant, read-write, foreign
	Type        string         `json:"type,omitempty"` // the Redis type, for kind foreign
	Holder      string         `json:"holder,omitempty"`
	Holders     []statusHolder `json:"holders,omitempty"`
	WriterWait  string         `json:"waiting_writer,omitempty"`
	TTLMS       *int64         `json:"ttl_ms,omitempty"` // -1: no expiry
	Fence       *uint64        `json:"fence,omitempty"`
	Truncated   bool           `json:"truncated,omitempty"`

	text status        // the table's row
	rtt  time.Duration // the table's round trip
}

type statusHolder struct {
	Token string `json:"token"`
	Mode  string `json:"mode"` // exclusive, reentrant, read, write
	Count int64  `json:"count,omitempty"`
	TTLMS int64  `json:"ttl_ms"`
	Meta  string `json:"metadata,omitempty"` // WithMetadata's value, as the table quotes it
}

// cmdStatus shows, per key and master, what the master holds, as
// redlock's Client.Inspect reads it (package layout describes it). A
// master that fails is asked once and skipped for the keys after it, so a
// hung master costs one timeout, not one per key.
func cmdStatus(ctx context.Context, e *env, keys []string, permits int, asJSON bool) int {
	sems := keys
	if permits > 0 {
		keys = semaphoreSlots(sems, permits)
	}
	timeout := max(e.timeout, statusTimeout) // no lock round: more time per round trip
	n := len(e.pools)
	quorum := n/2 + 1
	down := make([]error, n) // a master's failure, once it failed
	masters := make([]statusMaster, n)
	for i := range e.pools {
		masters[i].Addr = e.name(i)
	}
	var (
		c     *redlock.Client
		cOn   []*pool.RedisPool // c's pools
		cAt   []int             // c's masters, as indices into e.pools
		out   []statusKey
		short bool // some key had fewer than a quorum answering
	)
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for _, key := range keys {
		if err := ctx.Err(); err != nil {
			printErr(e.stderr, fmt.Errorf("status interrupted: %w", err))
			return exitFailure
		}
		sk := statusKey{Key: key, Quorum: quorum, Masters: make([]statusOnHost, n)}
		for i := range sk.Masters {
			sk.Masters[i].Addr = masters[i].Addr
		}
		// Each member's pool for this key: a cluster member's is the
		// node that owns the key's slot.
		slot := keyslot.Slot(key)
		var up []int
		var on []*pool.RedisPool
		for i := range e.pools {
			if down[i] != nil {
				continue
			}
			p := e.pools[i]
			if cm := e.clusters[i]; cm != nil {
				s := slot
				sk.Masters[i].Slot = &s
				addr, err := cm.owner(ctx, timeout, slot)
				sk.Masters[i].Node = addr
				if err == nil && cm.failed[addr] != "" {
					err = fmt.Errorf("node %s owns slot %d and did not answer (asked once, skipped for the keys after): %s", addr, slot, cm.failed[addr])
				}
				if err == nil {
					p, err = cm.node(addr)
				}
				if err != nil {
					if cm.slots == nil { // no seed answered
						down[i] = err
						masters[i].Error = err.Error()
					} else {
						sk.Masters[i].Error = err.Error()
					}
					continue
				}
				sk.Masters[i].Node = addr
			}
			up = append(up, i)
			on = append(on, p)
		}
		for i := range sk.Masters {
			if down[i] != nil {
				masters[i].SkippedKeys++
			}
		}
		if !slices.Equal(on, cOn) && len(on) > 0 {
			if c != nil {
				c.Close()
			}
			ps := make([]pool.Pool, len(on))
			for j, p := range on {
				ps[j] = p
			}
			var err error
			if c, err = redigo.New(ps, redlock.WithTimeout(timeout)); err != nil {
				printErr(e.stderr, err)
				return exitUsage
			}
			cOn, cAt = on, up
		}
		if len(up) > 0 {
			in, err := c.Inspect(ctx, key)
			if err != nil {
				printErr(e.stderr, errors.New(display(err.Error())))
				return failCode(err)
			}
			for _, m := range in.Masters {
				i := cAt[m.Index]
				p := cOn[m.Index]
				if cm := e.clusters[i]; cm != nil && m.Err != nil {
					// The slot moved since CLUSTER SLOTS was read:
					// follow MOVED once, and read the slots again for
					// the keys after.
					if addr := moved(m.Err, slot); addr != "" && cm.dialable(addr) == nil {
						cm.slots = nil
						if mp, err := cm.node(addr); err == nil {
							p = mp
							m = inspectOne(ctx, mp, key, timeout, m)
							sk.Masters[i].Node = addr
						}
					}
				}
				if m.Err != nil {
					err := m.Err
					if ne := (*redlock.NodeError)(nil); errors.As(err, &ne) {
						// c may be a client of the masters still up: name
						// the master by its place in --masters.
						named := *ne
						named.Index = i
						err = &named
					}
					msg := p.RedactError(err).Error()
					if cm := e.clusters[i]; cm != nil && unreachable(m.Err) {
						// One node of the cluster: only the keys of
						// its slots are skipped.
						cm.failed[p.Addr()] = msg
						sk.Masters[i].Error = msg
						continue
					}
					if unreachable(m.Err) {
						down[i] = m.Err
						masters[i].Error = msg
					} else {
						sk.Masters[i].Error = msg
					}
					continue
				}
				h := onHost(masters[i].Addr, m, p)
				h.Node, h.Slot = sk.Masters[i].Node, sk.Masters[i].Slot
				sk.Masters[i] = h
			}
		}
		holders := map[string]int{}
		shown := map[string]string{}
		metas := map[string]string{}
		free := 0
		for _, h := range sk.Masters {
			if !h.Answered {
				continue
			}
			sk.Answered++
			if h.Kind == "free" {
				free++
			} else {
				holders[h.Kind+"\x00"+h.Holder]++
				shown[h.Kind+"\x00"+h.Holder] = h.text.holder
				if len(h.Holders) == 1 {
					metas[h.Kind+"\x00"+h.Holder] = h.Holders[0].Meta
				}
			}
		}
		switch {
		case sk.Answered < quorum:
			sk.Verdict = "unknown"
			short = true
		case free >= quorum:
			sk.Verdict = "free"
		default:
			sk.Verdict = "split"
			for h, k := range holders {
				if k >= quorum {
					sk.Verdict, sk.HeldOn = "held", k
					sk.Holder, sk.text, sk.Meta = h[strings.IndexByte(h, 0)+1:], shown[h], metas[h]
					sk.MissingOn = free
				}
			}
		}
		out = append(out, sk)
	}
	failed := 0
	for i := range masters {
		masters[i].Answered = down[i] == nil
		if down[i] != nil {
			failed++
		}
	}
	code := exitOK
	if short {
		code = exitUnavailable
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		var ss []statusSemaphore
		if permits > 0 {
			ss = semaphores(sems, permits, out)
		}
		if err := enc.Encode(struct {
			Masters    []statusMaster    `json:"masters"`
			Keys       []statusKey       `json:"keys"`
			Semaphores []statusSemaphore `json:"semaphores,omitempty"`
			Quorum     int               `json:"quorum"`
			Failed     int               `json:"failed"`
		}{masters, out, ss, quorum, failed}); err != nil {
			printErr(e.stderr, err)
			return exitFailure
		}
		return code
	}
	printStatus(e, masters, out)
	if permits > 0 {
		for _, ss := range semaphores(sems, permits, out) {
			fmt.Fprintf(e.stdout, "semaphore %s: %d of %d permits held", display(ss.Key), ss.Held, ss.Permits)
			if ss.Unknown > 0 {
				fmt.Fprintf(e.stdout, ", %d unknown", ss.Unknown)
			}
			fmt.Fprintln(e.stdout)
			for i, h := range ss.text {
				if h != "" {
					fmt.Fprintf(e.stdout, "  permit %d: %s\n", i, h)
				}
			}
		}
	}
	switch {
	case short:
		fmt.Fprintf(e.stderr, "redlock status: for some key fewer than a quorum (%d of %d) of masters answered: its state is unknown\n", quorum, n)
	case failed > 0:
		fmt.Fprintf(e.stderr, "redlock status: warning: %d of %d masters did not answer; a quorum (%d) did\n", failed, n, quorum)
	}
	return code
}

// inspectOne reads key on the one node p (where a MOVED reply sent
// status), as Inspect reads a master; prev is the failed read, kept when
// no client could be made.
func inspectOne(ctx context.Context, p *pool.RedisPool, key string, timeout time.Duration, prev redlock.MasterState) redlock.MasterState {
	c, err := redigo.New([]pool.Pool{p}, redlock.WithTimeout(timeout))
	if err != nil {
		return prev
	}
	defer c.Close()
	in, err := c.Inspect(ctx, key)
	if err != nil || len(in.Masters) != 1 {
		return prev
	}
	m := in.Masters[0]
	m.Index = prev.Index
	return m
}

// unreachable reports whether a master's failure is the master's, not
// the key's: it did not answer in time or could not be connected to. Such
// a master is skipped for the keys after.
func unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, redlock.ErrMasterTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// onHost is what a master that answered holds for the key: for --json
// every string from the master with the pool's credentials removed, for
// the table the same cut short and escaped.
func onHost(addr string, m redlock.MasterState, p *pool.RedisPool) statusOnHost {
	st := m.State
	h := statusOnHost{Addr: addr, Answered: true, RoundTripUS: m.RTT.Microseconds(), Kind: st.Kind.String(),
		Truncated: st.Truncated, text: describe(st, p), rtt: m.RTT}
	if st.Kind == layout.KindForeign {
		h.Type = p.Redact(st.Type)
	}
	for _, hd := range st.Holders {
		h.Holders = append(h.Holders, statusHolder{Token: p.Redact(hd.Token), Mode: hd.Mode.String(), Count: hd.Count, TTLMS: ms(hd.TTL),
			Meta: p.Redact(hd.Meta)})
	}
	switch st.Kind {
	case layout.KindLock:
		h.Holder = h.Holders[0].Token
	case layout.KindReentrant:
		owners := make([]string, len(h.Holders))
		for i, o := range h.Holders {
			owners[i] = o.Token + "×" + strconv.FormatInt(o.Count, 10)
		}
		h.Holder = strings.Join(owners, ",")
	case layout.KindReadWrite:
		if len(h.Holders) > 0 && st.Holders[0].Mode == layout.ModeWrite {
			h.Holder = "writer " + h.Holders[0].Token
		} else {
			h.Holder = strconv.Itoa(len(h.Holders)) + " readers"
		}
	}
	if st.Intent != nil {
		h.WriterWait = p.Redact(st.Intent.Writer)
	}
	if st.Kind != layout.KindFree {
		t := ms(st.TTL)
		h.TTLMS = &t
	}
	if st.Fenced {
		f := st.Fence
		h.Fence = &f
	}
	return h
}

// ms is d in milliseconds; NoExpiry stays -1.
func ms(d time.Duration) int64 {
	if d == layout.NoExpiry {
		return -1
	}
	return d.Milliseconds()
}

// printStatus prints one table per key, then the masters that did not
// answer and the failures of single keys, each once: an error never
// widens the table.
func printStatus(e *env, masters []statusMaster, keys []statusKey) {
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	type keyErr struct{ key, msg string }
	var keyErrs []keyErr
	for _, sk := range keys {
		fmt.Fprintf(tw, "%s\n", display(sk.Key))
		fmt.Fprintln(tw, "  master\treachable\tkind\tholder\tttl\tfence\t")
		for _, h := range sk.Masters {
			if h.Slot != nil {
				h.Addr += " slot " + strconv.Itoa(*h.Slot)
				if h.Node != "" {
					h.Addr += " on " + h.Node
				}
			}
			switch {
			case h.Answered:
				st := h.text
				fmt.Fprintf(tw, "  %s\tyes (%v)\t%s\t%s\t%s\t%s\t\n", display(h.Addr), h.rtt.Round(10*time.Microsecond),
					st.kind, orDash(st.holder), orDash(st.ttl), orDash(st.fence))
			case h.Error != "":
				keyErrs = append(keyErrs, keyErr{sk.Key, h.Error})
				fmt.Fprintf(tw, "  %s\terror (below)\t\t\t\t\t\n", display(h.Addr))
			default:
				fmt.Fprintf(tw, "  %s\tno (below)\t\t\t\t\t\n", display(h.Addr))
			}
		}
		n := len(sk.Masters)
		switch sk.Verdict {
		case "held":
			fmt.Fprintf(tw, "  held by %s on %d of %d masters (quorum %d)\n", sk.text, sk.HeldOn, n, sk.Quorum)
			if sk.MissingOn > 0 {
				fmt.Fprintf(tw, "  missing on %d master(s) that answered (restarted or flushed): tolerates %d more failure(s), not %d, until the holder's next extension puts it back\n",
					sk.MissingOn, sk.HeldOn-sk.Quorum, sk.HeldOn+sk.MissingOn-sk.Quorum)
			}
		case "free":
			fmt.Fprintf(tw, "  free on a quorum (%d of %d masters answered)\n", sk.Answered, n)
		case "split":
			fmt.Fprintf(tw, "  neither held nor free on a quorum (%d of %d masters answered, quorum %d)\n", sk.Answered, n, sk.Quorum)
		default:
			fmt.Fprintf(tw, "  unknown: only %d of %d masters answered (quorum %d)\n", sk.Answered, n, sk.Quorum)
		}
	}
	tw.Flush()
	var down []statusMaster
	for _, m := range masters {
		if m.Error != "" {
			down = append(down, m)
		}
	}
	if len(down) > 0 {
		fmt.Fprintf(e.stdout, "\ndid not answer (asked once, skipped for the keys after):\n")
		for _, m := range down {
			fmt.Fprintf(e.stdout, "  %s\n", display(m.Error))
		}
	}
	if len(keyErrs) > 0 {
		fmt.Fprintf(e.stdout, "\nfailed for one key:\n")
		for _, k := range keyErrs {
			fmt.Fprintf(e.stdout, "  key %s: %s\n", display(k.key), display(k.msg))
		}
	}
}

// statusTimeout is the least time status gives each round trip to a
// master: a look at the masters is no lock round.
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
	meta := func(h layout.Holder) string { // the holder's metadata, quoted: never a cell of its own
		if h.Meta == "" {
			return ""
		}
		return " " + strconv.Quote(p.Redact(h.Meta))
	}
	var row status
	switch st.Kind {
	case layout.KindFree:
		row.kind = "free"
	case layout.KindLock:
		row.kind, row.holder = "lock", show(st.Holders[0].Token)+meta(st.Holders[0])
	case layout.KindReentrant:
		owners := make([]string, len(st.Holders))
		for i, h := range st.Holders {
			owners[i] = display(p.Redact(h.Token)) + "×" + strconv.FormatInt(h.Count, 10) + meta(h) // owner×holds
		}
		row.kind, row.holder = "reentrant", strings.Join(owners, ",")
	case layout.KindReadWrite:
		row.kind = "read-write"
		if len(st.Holders) > 0 && st.Holders[0].Mode == layout.ModeWrite {
			row.holder = "writer " + show(st.Holders[0].Token) + meta(st.Holders[0])
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
