package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The guard: every byte from a master is untrusted.
//
// redigo's reply parser believes what a master says: a header "$300000000000000"
// makes it allocate that much (or panic, killing the process), and arrays nested
// a million deep recurse until the stack overflows (a fatal error, beyond any
// recover). So every connection of a RedisPool reads through a guard, a
// net.Conn whose Read passes the bytes on unchanged while it follows the
// RESP2 framing (+ - : $ *) byte by byte. A reply that breaks the framing or
// one of the Limits ends the connection with a *ProtocolError before the
// parser has seen the header that would have hurt it.
//
// A bulk string or an array whose parsed form would take more than holdAbove
// bytes, or take its reply past holdAbove, is also held back until all of
// it has arrived: the parser sizes its
// buffers from the header, so a master that announces a megabyte and then
// sends a byte now and then would otherwise make it allocate the megabyte at
// once, on every connection. Held back, a reply costs what has actually
// arrived, never more than MaxReply.

// Limits bound what one reply from a master may be. A zero field takes its
// default. The defaults are far above anything a lock master sends (tokens,
// counters, script hashes, the INFO and CONFIG GET replies of redlock doctor,
// the hashes that redlock status reads, pub/sub messages that carry a key)
// and far below what would hurt the client.
type Limits struct {
	// MaxBulk is the most bytes one bulk string may hold (a pub/sub message
	// carries the key: keys longer than this cannot be waited on).
	MaxBulk int
	// MaxArray is the most elements one array may have.
	MaxArray int
	// MaxDepth is how deep arrays may nest (1: a flat array).
	MaxDepth int
	// MaxLine is the most bytes a status, error or integer line may have.
	MaxLine int
	// MaxReply bounds what one reply may cost once parsed: the bytes of its
	// strings, plus 16 bytes per array element and 32 per value.
	MaxReply int
}

// Defaults for Limits.
const (
	DefaultMaxBulk  = 1 << 20  // 1 MiB
	DefaultMaxArray = 1 << 16  // 65536 elements
	DefaultMaxDepth = 8        // the library's replies nest at most 1 deep
	DefaultMaxLine  = 64 << 10 // 64 KiB
	DefaultMaxReply = 4 << 20  // 4 MiB
)

// holdAbove is the parsed size above which a bulk string or an array (or
// the reply it is part of) is passed on only once it has arrived in full.
const holdAbove = 16 << 10

// What one value costs the parser, besides its bytes (an interface and a
// slice header), and what each array element costs (an interface).
const (
	valueCost   = 32
	elementCost = 16
)

// withDefaults fills in the zero fields.
func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxBulk, DefaultMaxBulk)
	def(&l.MaxArray, DefaultMaxArray)
	def(&l.MaxDepth, DefaultMaxDepth)
	def(&l.MaxLine, DefaultMaxLine)
	def(&l.MaxReply, DefaultMaxReply)
	return l
}

// ProtocolError reports bytes from a master that break the RESP framing or
// exceed the Limits. The connection that read them is broken: every later
// read on it returns the same error, and the pool discards it. The message
// describes the problem with numbers only, never quoting what the master
// sent.
type ProtocolError struct {
	Problem string // e.g. "bulk string of 300000000000000 bytes (limit 1048576)"
	Offset  int64  // where in the connection's stream, in bytes
}

// Error says what was wrong.
func (e *ProtocolError) Error() string {
	return "pool: protocol violation by the master at byte " + strconv.FormatInt(e.Offset, 10) + ": " + e.Problem + "; connection closed"
}

// GuardConn returns c with its reads checked as described for Limits: a
// reply that breaks the RESP2 framing or exceeds l fails the read with a
// *ProtocolError, and so does every read after it. Every connection of a
// RedisPool is guarded; use GuardConn for pools of your own, for example
// with redis.DialContextFunc (over the TLS connection, not under it).
func GuardConn(c net.Conn, l Limits) net.Conn {
	return guardOver(c, c, l)
}

// guardOver guards c, whose bytes come through the socket of raw (c
// itself, or the TCP connection under c's TLS).
func guardOver(c, raw net.Conn, l Limits) *guardConn {
	return &guardConn{Conn: c, f: newFramer(l), raw: rawOf(raw)}
}

type guardConn struct {
	net.Conn
	f   framer
	raw syscall.RawConn // the socket, for ReplyWaiting; nil: none to look at
	// rerr is a read error WaitReadable met with nothing read, for the
	// next Read to report.
	rerr error
	// dmu guards the deadlines, which reach the socket lazily (see
	// SetReadDeadline), and waiting.
	dmu sync.Mutex
	// rdl and wdl are the deadlines last asked for; rdirty and wdirty say
	// the socket may not have them yet; reading and writing, that a read
	// or write of the socket is under way (a deadline asked for then
	// reaches it at once).
	rdl, wdl       time.Time
	rdirty, wdirty bool
	reading        bool
	// writing counts the writes of the socket under way: net.Conn lets
	// goroutines write at once (a bool cleared by the first to finish
	// left a deadline set during the second's write only noted, and the
	// write waited on past it).
	writing int
	// waiting is set while WaitReadable waits: only then may ctx's end
	// move the read deadline, and until the next read the socket's read
	// deadline is WaitReadable's own.
	waiting bool
	// stash[off:] was read from the connection but not yet passed on;
	// stash[0] is at stream position start.
	stash []byte
	off   int
	start int64
	err   error // sticky: the framing was broken
}

// maxKeptStash is the most buffer a guard keeps once it is drained.
const maxKeptStash = 8 << 10

func (g *guardConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if g.off < len(g.stash) {
			if free := g.f.free - (g.start + int64(g.off)); free > 0 {
				n := copy(p, g.stash[g.off:g.off+int(min(free, int64(len(g.stash)-g.off)))])
				g.off += n
				if g.off == len(g.stash) {
					g.drop()
				}
				return n, nil
			}
		}
		if g.err != nil {
			return 0, g.err
		}
		if g.rerr != nil {
			err := g.rerr
			g.rerr = nil
			return 0, err
		}
		if g.off == len(g.stash) {
			// Nothing held back: read straight into p.
			n, err := g.readSocket(p)
			base := g.f.pos
			if ferr := g.f.feed(p[:n]); ferr != nil {
				g.err = ferr
				return 0, ferr
			}
			ok := int(g.f.free - base)
			if ok < n {
				g.stash = append(g.stash[:0], p[ok:n]...)
				g.off, g.start = 0, base+int64(ok)
			}
			if ok > 0 || err != nil {
				return ok, err
			}
			continue
		}
		// Part of a reply is held back: read on until it is complete.
		if g.off > 0 {
			g.stash = g.stash[:copy(g.stash, g.stash[g.off:])]
			g.start += int64(g.off)
			g.off = 0
		}
		_, err := g.stashMore()
		if g.err != nil {
			return 0, g.err
		}
		if err != nil && g.f.free <= g.start {
			return 0, err // (with something to pass on, the error comes again)
		}
	}
}

// WaitReadable waits until the next reply has arrived whole, reading it
// into the stash, so that nothing is consumed (ReadWaiter): the read that
// follows takes it without waiting for the network. (Waiting only for its
// first byte would leave that read to wait for the rest, past the
// caller's deadline and ctx, and unable to stop without breaking the
// connection.) A wait that ends first keeps what arrived in the stash,
// for the next read to pass on. The read deadline it sets is replaced by
// the next reader's own.
func (g *guardConn) WaitReadable(ctx context.Context, deadline time.Time) error {
	if g.err != nil || g.rerr != nil || (g.off < len(g.stash) && g.f.between()) {
		return nil // something to pass on already
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if g.off == len(g.stash) {
		// Everything fed was passed on: the stash starts afresh at the
		// next byte of the stream.
		g.drop()
		g.start = g.f.pos
	}
	g.dmu.Lock()
	_ = g.Conn.SetReadDeadline(deadline) // before ctx's end can move it
	g.waiting = true
	g.rdirty = true // the next read puts the reader's own deadline back
	g.dmu.Unlock()
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() {
			g.dmu.Lock()
			if g.waiting {
				_ = g.Conn.SetReadDeadline(time.Now()) // ends the wait below
			}
			g.dmu.Unlock()
		})
	}
	err := g.fill()
	g.dmu.Lock()
	g.waiting = false
	g.dmu.Unlock()
	if stop != nil {
		stop()
	}
	if err == nil || g.err != nil {
		return nil // the next Read passes the reply on, or reports the violation
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return err
	}
	g.rerr = err
	return nil
}

// fill reads into the stash until the replies in it are whole (the
// framer is between replies), the framing breaks (g.err), or a read
// fails, which it returns.
func (g *guardConn) fill() error {
	for {
		n, err := g.stashMore()
		if g.err != nil {
			return nil
		}
		if n > 0 && g.f.between() {
			return nil
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrNoProgress
		}
	}
}

// stashMore reads once into the stash, behind what it holds, and feeds
// the framer what it read; bytes that break the framing set g.err and
// empty the stash.
func (g *guardConn) stashMore() (int, error) {
	g.stash = slices.Grow(g.stash, 4096)
	end := len(g.stash)
	n, err := g.readSocket(g.stash[end:cap(g.stash)])
	if ferr := g.f.feed(g.stash[end : end+n]); ferr != nil {
		g.err = ferr
		g.drop()
		return 0, ferr
	}
	g.stash = g.stash[:end+n]
	return n, err
}

// Deadlines reach the socket lazily. redigo sets a connection's read
// deadline before every reply it parses and its write deadline before
// every command it buffers, and each setting re-arms a runtime timer
// under a lock: with many commands pipelined on one connection that was
// some 7% of the client's CPU per lock+unlock. Most of those replies are
// parsed from bytes already read, and the commands leave in one write.
// So SetReadDeadline and SetWriteDeadline only note the deadline, and the
// next read or write of the socket sets the newest one first: every read
// and write of the socket still runs under the deadline last asked for,
// as it would have. A deadline asked for while a read or write of the
// socket is under way (from another goroutine) reaches it at once, as
// net.Conn promises. An error setting it is the read's or write's.

// SetReadDeadline notes t for the socket's next read (see above).
func (g *guardConn) SetReadDeadline(t time.Time) error {
	g.dmu.Lock()
	defer g.dmu.Unlock()
	g.rdl = t
	if g.reading && !g.waiting {
		return g.Conn.SetReadDeadline(t)
	}
	g.rdirty = true
	return nil
}

// SetWriteDeadline notes t for the socket's next write (see above).
func (g *guardConn) SetWriteDeadline(t time.Time) error {
	g.dmu.Lock()
	defer g.dmu.Unlock()
	g.wdl = t
	if g.writing > 0 {
		return g.Conn.SetWriteDeadline(t)
	}
	g.wdirty = true
	return nil
}

// SetDeadline is SetReadDeadline and SetWriteDeadline.
func (g *guardConn) SetDeadline(t time.Time) error {
	rerr := g.SetReadDeadline(t)
	werr := g.SetWriteDeadline(t)
	return errors.Join(rerr, werr)
}

// readSocket reads the socket under the newest read deadline asked for
// (WaitReadable's own while it waits).
func (g *guardConn) readSocket(p []byte) (int, error) {
	g.dmu.Lock()
	if g.rdirty && !g.waiting {
		if err := g.Conn.SetReadDeadline(g.rdl); err != nil {
			g.dmu.Unlock()
			return 0, err
		}
		g.rdirty = false
	}
	g.reading = true
	g.dmu.Unlock()
	n, err := g.Conn.Read(p)
	g.dmu.Lock()
	g.reading = false
	g.dmu.Unlock()
	return n, err
}

// Write writes p to the socket under the newest write deadline asked for.
func (g *guardConn) Write(p []byte) (int, error) {
	g.dmu.Lock()
	if g.wdirty {
		if err := g.Conn.SetWriteDeadline(g.wdl); err != nil {
			g.dmu.Unlock()
			return 0, err
		}
		g.wdirty = false
	}
	g.writing++
	g.dmu.Unlock()
	n, err := g.Conn.Write(p)
	g.dmu.Lock()
	g.writing--
	g.dmu.Unlock()
	return n, err
}

// drop empties the stash, keeping a small buffer for the next hold.
func (g *guardConn) drop() {
	g.start += int64(len(g.stash))
	g.off = 0
	if cap(g.stash) > maxKeptStash {
		g.stash = nil
	} else {
		g.stash = g.stash[:0]
	}
}

// framer follows the RESP2 framing of a stream of replies, fed in chunks.
type framer struct {
	lim  Limits
	pos  int64 // bytes fed so far
	free int64 // bytes before this position may be passed on
	hold int   // depth of the value held back; -1 when none is

	st     uint8
	kind   byte  // the current line's type
	n      int64 // the line's length so far, or the header's number
	neg    bool  // the header's number has a minus sign
	digits int
	cr     bool  // the line's last byte was '\r'
	remain int64 // bytes of the bulk string still due
	stack  []int // elements still due in each open array
	cost   int64 // of the reply being read
}

const (
	stType      = iota // a value starts
	stLine             // in a status or error line
	stNum              // in a header or an integer
	stNumLF            // a header's '\r' came; '\n' is due
	stPayload          // in a bulk string
	stPayloadCR        // a bulk string's '\r' is due
	stPayloadLF        // a bulk string's '\n' is due
)

func newFramer(l Limits) framer {
	l = l.withDefaults()
	return framer{lim: l, hold: -1, stack: make([]int, 0, min(l.MaxDepth, 64))}
}

func (f *framer) fail(at int, format string, args ...any) error {
	return &ProtocolError{Problem: fmt.Sprintf(format, args...), Offset: f.pos + int64(at)}
}

// feed checks b, the next bytes of the stream, and moves free past those
// that may be passed on.
func (f *framer) feed(b []byte) error {
	for i := 0; i < len(b); {
		switch f.st {
		case stType:
			f.kind = b[i]
			f.n, f.neg, f.digits, f.cr = 0, false, 0, false
			switch f.kind {
			case '+', '-':
				f.st = stLine
			case ':', '$', '*':
				f.st = stNum
			default:
				return f.fail(i, "a reply starts with byte %#02x, not one of + - : $ *", b[i])
			}
			i++
		case stLine:
			j := bytes.IndexByte(b[i:], '\n')
			seg := b[i:]
			if j >= 0 {
				seg = b[i : i+j]
			}
			if len(seg) > 0 {
				f.cr = seg[len(seg)-1] == '\r'
			}
			f.n += int64(len(seg))
			if f.n > int64(f.lim.MaxLine)+1 {
				return f.fail(i+len(seg), "a line longer than %d bytes", f.lim.MaxLine)
			}
			if j < 0 {
				i = len(b)
				continue
			}
			i += j + 1
			if !f.cr {
				return f.fail(i-1, "a line ends in a bare newline")
			}
			if err := f.charge(i, f.n-1+valueCost); err != nil {
				return err
			}
			f.done()
		case stNum:
			c := b[i]
			switch {
			case c >= '0' && c <= '9':
				f.digits++
				if f.digits > 19 {
					return f.fail(i, "a number of more than 19 digits")
				}
				f.n = f.n*10 + int64(c-'0')
				if err := f.checkLen(i); err != nil {
					return err
				}
			case c == '-' && f.digits == 0 && !f.neg:
				f.neg = true
			case c == '\r' && f.digits > 0:
				f.st = stNumLF
			default:
				return f.fail(i, "byte %#02x in a number", c)
			}
			i++
		case stNumLF:
			if b[i] != '\n' {
				return f.fail(i, "a header's '\\r' is not followed by '\\n'")
			}
			if err := f.header(i); err != nil {
				return err
			}
			i++
		case stPayload:
			k := int(min(f.remain, int64(len(b)-i)))
			f.remain -= int64(k)
			i += k
			if f.remain == 0 {
				f.st = stPayloadCR
			}
		case stPayloadCR:
			if b[i] != '\r' {
				return f.fail(i, "a bulk string is longer than its header says")
			}
			f.st = stPayloadLF
			i++
		case stPayloadLF:
			if b[i] != '\n' {
				return f.fail(i, "a bulk string does not end in '\\r\\n'")
			}
			i++
			f.done()
		}
	}
	f.pos += int64(len(b))
	if f.hold < 0 {
		f.free = f.pos
	}
	return nil
}

// checkLen rejects a header's number as soon as it passes its limit.
func (f *framer) checkLen(i int) error {
	switch {
	case f.kind == '$' && f.n > int64(f.lim.MaxBulk):
		return f.fail(i, "a bulk string of more than %d bytes", f.lim.MaxBulk)
	case f.kind == '*' && f.n > int64(f.lim.MaxArray):
		return f.fail(i, "an array of more than %d elements", f.lim.MaxArray)
	}
	return nil
}

// header acts on a complete header or integer line; nl is the index of
// its '\n' in the chunk being fed.
func (f *framer) header(nl int) error {
	if f.neg && (f.kind != ':' && (f.n != 1 || f.digits != 1)) {
		return f.fail(nl, "a negative length other than -1")
	}
	null := f.neg && f.kind != ':'
	switch {
	case f.kind == ':' || null:
		if err := f.charge(nl, valueCost); err != nil {
			return err
		}
		f.done()
	case f.kind == '$':
		if err := f.charge(nl, f.n+valueCost); err != nil {
			return err
		}
		f.holdFrom(nl, f.n)
		f.remain = f.n
		f.st = stPayload
		if f.remain == 0 {
			f.st = stPayloadCR
		}
	default: // '*'
		if err := f.charge(nl, f.n*elementCost+valueCost); err != nil {
			return err
		}
		if f.n == 0 {
			f.done()
			return nil
		}
		if len(f.stack) >= f.lim.MaxDepth {
			return f.fail(nl, "arrays nested more than %d deep", f.lim.MaxDepth)
		}
		f.holdFrom(nl, f.n*elementCost)
		f.stack = append(f.stack, int(f.n))
		f.st = stType
	}
	return nil
}

// holdFrom holds back the value whose header ends at index nl when it,
// or the reply so far with it, would cost the parser more than holdAbove
// (arrays of 1024 elements nested 8 deep cost 16 KiB each: held one by
// one, 56 bytes would cost 128 KiB): its header's '\n' and what follows
// wait until the value is complete.
func (f *framer) holdFrom(nl int, size int64) {
	if (size > holdAbove || f.cost > holdAbove) && f.hold < 0 {
		f.hold = len(f.stack)
		f.free = f.pos + int64(nl)
	}
}

// charge adds what a value costs to its reply's total.
func (f *framer) charge(i int, c int64) error {
	f.cost += c
	if f.cost > int64(f.lim.MaxReply) {
		return f.fail(i, "a reply that would take more than %d bytes once parsed", f.lim.MaxReply)
	}
	return nil
}

// between reports whether the bytes fed so far end with a whole reply.
func (f *framer) between() bool { return f.st == stType && len(f.stack) == 0 }

// done completes a value, and with it every array it completes.
func (f *framer) done() {
	f.st = stType
	for {
		if f.hold == len(f.stack) {
			f.hold = -1 // complete: free moves on at the end of the chunk
		}
		top := len(f.stack) - 1
		if top < 0 {
			f.cost = 0 // the reply is complete
			return
		}
		if f.stack[top]--; f.stack[top] > 0 {
			return
		}
		f.stack = f.stack[:top]
	}
}
