package pool

import (
	"errors"
	"net"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// Credentials never show.
//
// A master may quote what it was sent: one whose AUTH command was renamed
// away answers "ERR unknown command 'AUTH', with args beginning with:
// 'user' 'password'", and a hostile one can put anything anywhere. So the
// errors a RedisPool returns, and those the redlock package reports for its
// masters (through Redactor), have the configured username and password
// removed from their text, whatever the master sent.

// Redactor is implemented by pools that hold credentials. The redlock
// package passes every error it reports for a master (in a *NodeError, in
// logs) through RedactError when the master's pool implements it.
type Redactor interface {
	// RedactError returns err unchanged when its text shows no credential,
	// else an error whose text has them replaced by "[redacted]".
	RedactError(err error) error
}

var _ Redactor = (*RedisPool)(nil)

// Redact returns s with the pool's username and password replaced by
// "[redacted]": for text from the master that a program prints (for
// example the fields of INFO).
func (p *RedisPool) Redact(s string) string { return p.secrets.redact(s) }

// RedactError returns err unchanged when its text shows neither the
// pool's username nor its password. Otherwise it returns an error whose
// text has them replaced by "[redacted]": a redis.Error (a reply from the
// master) stays a redis.Error, a *DialError stays a *DialError around the
// redacted cause, and any other error becomes one that still matches, with
// errors.Is, what the original matched, but unwraps to nothing that could
// show the credentials; errors.As still finds a *ProtocolError in it, and
// a net.Error that tells whether it was a timeout. Redacting a redacted
// error changes nothing more.
func (p *RedisPool) RedactError(err error) error { return p.secrets.redactError(err) }

const redacted = "[redacted]"

// echoMarker starts the part of Redis's "unknown command" error that quotes
// the command's arguments, cut short at 128 bytes: a password cut short
// would slip through a search for the whole one.
const echoMarker = "with args beginning with:"

// redactor removes a pool's credentials from text. A nil *redactor (no
// credentials) changes nothing.
type redactor struct {
	username, password string
}

func newRedactor(username, password string) *redactor {
	if password == "" {
		return nil
	}
	return &redactor{username: username, password: password}
}

func (r *redactor) redact(s string) string {
	if r == nil {
		return s
	}
	if i := strings.Index(s, echoMarker); i >= 0 {
		s = s[:i+len(echoMarker)] + " " + redacted
	}
	user := r.username
	if user == "default" {
		user = ""
	}
	return replaceSecrets(s, r.password, user)
}

func (r *redactor) redactError(err error) error {
	if r == nil || err == nil {
		return err
	}
	msg := err.Error()
	clean := r.redact(msg)
	if clean == msg {
		return err
	}
	// The switch rebuilds err's own value with the clean text, so it looks
	// at err itself: anything else is wrapped below, whatever it wraps.
	switch e := err.(type) { //nolint:errorlint // err's own type, not what it wraps
	case redis.Error:
		return redis.Error(clean)
	case *DialError:
		return &DialError{Addr: e.Addr, Err: r.redactError(e.Err)}
	}
	return &redactedError{msg: clean, cause: err}
}

// redactedError is an error whose text was redacted: it matches what its
// cause matched, with errors.Is, but never unwraps to it.
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string        { return e.msg }
func (e *redactedError) Is(target error) bool { return errors.Is(e.cause, target) }

// As finds, in the cause, what cannot show the credentials: a
// *ProtocolError (whose text is the guard's own, numbers and fixed words)
// and, for a net.Error, whether it was a timeout (its text redacted).
func (e *redactedError) As(target any) bool {
	switch t := target.(type) {
	case **ProtocolError:
		return errors.As(e.cause, t)
	case *net.Error:
		var ne net.Error
		if errors.As(e.cause, &ne) {
			*t = &redactedNetError{redactedError: e, timeout: ne.Timeout()}
			return true
		}
	}
	return false
}

// redactedNetError is a redactedError as a net.Error.
type redactedNetError struct {
	*redactedError
	timeout bool
}

func (e *redactedNetError) Timeout() bool   { return e.timeout }
func (e *redactedNetError) Temporary() bool { return e.timeout }

// replaceSecrets replaces pw in s wherever it stands, and user (unless
// empty) where it stands as a word: not inside a longer run of letters,
// digits, '_' or '-' (a username such as "app" leaves "application"
// alone). A "[redacted]" already in s is left as it is, so that redacting
// twice changes nothing more (a password such as "e" would otherwise be
// found again inside it).
func replaceSecrets(s, pw, user string) string {
	if !strings.Contains(s, pw) && (user == "" || !strings.Contains(s, user)) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, pw):
			b.WriteString(redacted)
			i += len(pw)
		case user != "" && strings.HasPrefix(rest, user) &&
			(i == 0 || !wordByte(s[i-1])) && (i+len(user) == len(s) || !wordByte(s[i+len(user)])):
			b.WriteString(redacted)
			i += len(user)
		case strings.HasPrefix(rest, redacted):
			b.WriteString(redacted)
			i += len(redacted)
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

func wordByte(c byte) bool {
	return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
