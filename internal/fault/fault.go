// Package fault holds the failures that the quorum core and the redigo
// transports both name: bad input, a reply parser's panic, a reply that
// does not fit its command, a connection its master closed.
package fault

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"syscall"
)

// ErrInvalid is redlock.ErrInvalid: bad input.
var ErrInvalid = errors.New("redlock: invalid argument")

// ErrPanic is matched by the error of a master whose reply made the reply
// parser panic (only on pools that package pool did not make).
var ErrPanic = errors.New("redlock: the reply parser panicked")

// PanicError turns a recovered value into an error that matches ErrPanic.
func PanicError(p any) error { return fmt.Errorf("%w: %v", ErrPanic, p) }

// DesyncError says that a reply does not fit its command: the connection
// is out of step with the master (a stray reply), and every reply on it
// after that would answer the wrong command.
type DesyncError struct {
	Cmd, Reply string
}

func (e *DesyncError) Error() string {
	return fmt.Sprintf("unexpected reply %s to %s: the connection is out of step", e.Reply, e.Cmd)
}

// Describe names a reply for an error message. Bytes from a master are
// quoted only when the reply is short and plain (printable ASCII without
// quotes or backslashes), so that they show whole and unchanged: a
// password a master echoes is then found and redacted (pool.Redactor),
// where a reply cut short, escaped, or printed as decimal bytes would
// show it in a form the redaction does not recognise.
func Describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case []byte:
		if quotable(string(v)) {
			return `"` + string(v) + `"`
		}
		return "a bulk string of " + strconv.Itoa(len(v)) + " bytes"
	case string:
		if quotable(v) {
			return "string(" + v + ")"
		}
		return "a status of " + strconv.Itoa(len(v)) + " bytes"
	case []any:
		return "an array of " + strconv.Itoa(len(v)) + " elements"
	case int64:
		return "int64(" + strconv.FormatInt(v, 10) + ")"
	default:
		return fmt.Sprintf("a reply of type %T", v)
	}
}

// quotable reports whether s may be quoted whole in a message.
func quotable(s string) bool {
	if len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// BrokenConn reports whether err says the master closed the connection
// (EOF, reset, broken pipe): it runs nothing more that came on it. Not
// net.ErrClosed, which says this side closed it, as the mux does when a
// master stalls or is out of step, and the master may still run what it
// read.
func BrokenConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// BadBytesError says that a master answered with bytes no server sends:
// a guarded connection broke on them (*pool.ProtocolError, which Err
// holds). The master answered, unlike one that timed out. Its message and
// what it wraps are Err's.
type BadBytesError struct{ Err error }

func (e *BadBytesError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *BadBytesError) Unwrap() error { return e.Err }
