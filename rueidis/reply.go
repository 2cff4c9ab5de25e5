package rueidis

import (
	"errors"
	"fmt"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/transport"
)

// Replies. rueidis decodes a reply into a message that tells an integer,
// a string (status and bulk alike), a null, an array, a map, a double and
// a boolean apart. The lock's scripts and commands answer only integers,
// strings, nulls and error replies (internal/scripts/*.lua), so value
// lets exactly those through, in redigo's shapes, and turns anything
// else into an error: a reply the lock did not ask for is never a vote.

// value returns msg (null when isNil) as a reply of shape: SET's "OK" as
// a string, every other string as []byte (a bulk string).
func value(shape transport.ReplyShape, msg *lib.RedisMessage, isNil bool) (any, error) {
	var v any
	switch {
	case isNil:
		v = nil
	case msg.IsInt64():
		n, _ := msg.ToInt64()
		v = n
	case msg.IsString():
		s, _ := msg.ToString()
		if shape == transport.ReplySet {
			v = s
		} else {
			v = []byte(s)
		}
	case shape == transport.ReplyInfo && verbatim(msg):
		s, _ := msg.ToString()
		v = []byte(s[4:])
	default:
		return nil, &desyncError{err: fmt.Errorf("reply of type %s", typeName(msg))}
	}
	if !shape.Fits(v) {
		return nil, &desyncError{err: errors.New("reply that does not fit the command")}
	}
	return v, nil
}

// verbatim reports whether msg is a RESP3 verbatim string (INFO's reply
// over RESP3), which rueidis hands back with its format prefix ("txt:").
func verbatim(msg *lib.RedisMessage) bool {
	if msg.IsString() || msg.IsInt64() || msg.IsArray() || msg.IsMap() || msg.IsBool() || msg.IsFloat64() || msg.IsNil() {
		return false
	}
	s, err := msg.ToString()
	return err == nil && len(s) >= 4 && s[3] == ':'
}

// replyError returns an error reply as a transport.ReplyError: the master's
// message whole (rueidis's RedisError drops a leading "ERR ").
func replyError(msg *lib.RedisMessage, re *lib.RedisError) transport.ReplyError {
	if s, _ := msg.ToString(); s != "" {
		return transport.ReplyError(s)
	}
	return transport.ReplyError(re.Error())
}

// typeName names a message's type without printing its bytes.
func typeName(msg *lib.RedisMessage) string {
	switch {
	case msg.IsArray():
		return "array"
	case msg.IsMap():
		return "map"
	case msg.IsBool():
		return "boolean"
	case msg.IsFloat64():
		return "double"
	}
	return "unknown"
}

// desyncError is a reply that is not one the lock's commands give.
type desyncError struct{ err error }

func (e *desyncError) Error() string { return "unexpected " + e.err.Error() }
func (e *desyncError) Unwrap() error { return e.err }
