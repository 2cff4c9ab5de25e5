package redigot

import (
	"errors"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Do runs s (a script that takes a fixed number of keys) on c with keys
// and then values in keysAndArgs, waiting at most timeout for the reply
// (the EVAL fallback gets what is left of it); timeout 0 leaves both to
// the connection's own read timeout. c must support
// redis.ConnWithTimeout.
func Do(s *scripts.Script, c redis.Conn, timeout time.Duration, keysAndArgs ...any) (any, error) {
	return DoKeys(s, c, timeout, s.KeyCount(), keysAndArgs...)
}

// DoKeys is Do for a script that takes any number of keys: the first
// nkeys of keysAndArgs are keys.
func DoKeys(s *scripts.Script, c redis.Conn, timeout time.Duration, nkeys int, keysAndArgs ...any) (any, error) {
	return DoEvalSHA(c, timeout, s.Source(), s.AppendArgsKeys(make([]any, 0, 2+len(keysAndArgs)), nkeys, keysAndArgs...))
}

// DoEvalSHA runs EVALSHA with args (a script's hash and key count first)
// on c and, when the master's script cache does not hold it (NOSCRIPT),
// EVAL of src with the same keys and values, waiting at most timeout in
// all (0: the connection's own read timeout). args is not modified.
func DoEvalSHA(c redis.Conn, timeout time.Duration, src string, args []any) (any, error) {
	start := time.Now()
	reply, err := redis.DoWithTimeout(c, timeout, "EVALSHA", args...)
	if !IsNoScript(err) {
		return reply, err
	}
	left := time.Duration(0) // 0: the connection's own read timeout, as for EVALSHA
	if timeout > 0 {
		if left = timeout - time.Since(start); left <= 0 {
			return nil, err
		}
	}
	eval := append([]any{src}, args[1:]...)
	return redis.DoWithTimeout(c, left, "EVAL", eval...)
}

// Load puts s into the master's script cache.
func Load(s *scripts.Script, c redis.Conn, timeout time.Duration) error {
	_, err := redis.DoWithTimeout(c, timeout, "SCRIPT", "LOAD", s.Source())
	return err
}

// IsNoScript reports whether err is the master's NOSCRIPT reply.
func IsNoScript(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(string(re), "NOSCRIPT")
}
