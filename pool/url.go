package pool

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ErrBadURL is matched (with errors.Is) by every error NewFromURL and
// ParseURL return for a malformed URL. The messages never contain the
// password.
var ErrBadURL = errors.New("pool: bad master URL")

// NewFromURL returns a pool of connections to the master named by a URL of
// the form redis://[[user]:password@]host[:port][/db], or rediss:// for TLS.
// The port defaults to 6379 and the database to 0. Options given after the
// URL override what the URL says.
func NewFromURL(rawURL string, opts ...Option) (*RedisPool, error) {
	addr, urlOpts, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return build(addr, append(urlOpts, opts...))
}

// ParseURL checks a master URL and returns the master's host:port and the
// options the URL implies (credentials, database, TLS).
func ParseURL(rawURL string) (addr string, opts []Option, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadURL}, args...)...)
	}
	if rawURL == "" {
		return "", nil, bad("empty")
	}
	if !strings.Contains(rawURL, "://") {
		return "", nil, bad("no scheme: want redis://host:port or rediss://host:port")
	}
	// Text before the last '@' may be user information: a password with
	// '/', '?' or '#' not escaped ends the authority early and the parser
	// takes part of it for the port, and a '%' in it makes the parser
	// quote the escape. With an '@', neither the parser's reason nor a
	// host or port is quoted.
	userInfo := strings.LastIndex(rawURL, "@") > strings.Index(rawURL, "://")
	u, err := url.Parse(rawURL)
	if err != nil {
		if userInfo {
			return "", nil, bad("not a valid URL (not quoted, in case it holds a password; escape '%%', '/', '?', '#' and '@' in credentials)")
		}
		// url.Error repeats the whole URL: keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", nil, bad("%v", err)
	}
	if userInfo && u.User == nil {
		return "", nil, bad("'@' after the host (a password with '/', '?' or '#' not escaped as %%2F, %%3F, %%23?); not quoted")
	}
	var o options
	switch u.Scheme {
	case "redis":
	case "rediss":
		o.useTLS = true
	case "":
		return "", nil, bad("no scheme: want redis:// or rediss://")
	default:
		return "", nil, bad("scheme %q: want redis or rediss", u.Scheme)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		if strings.HasSuffix(u.Host, ":") {
			return "", nil, bad("empty port")
		}
		port = "6379"
	}
	if err := checkHostPort(host, port); err != nil {
		return "", nil, bad("%v", err)
	}
	if u.User != nil {
		o.username = u.User.Username()
		pw, ok := u.User.Password()
		if !ok || pw == "" {
			// Not quoted: in redis://secret@host the "user" is a password.
			return "", nil, bad("the user has no password (write redis://user:password@host or redis://:password@host)")
		}
		o.password = pw
	}
	switch path := strings.TrimPrefix(u.Path, "/"); path {
	case "":
	default:
		db, err := strconv.Atoi(path)
		if err != nil || db < 0 {
			// Not quoted: in redis://host/secret the "database" is a
			// password in the wrong place.
			return "", nil, bad("the database (the path after host:port) is not a number >= 0")
		}
		o.db = db
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", nil, bad("query parameters and fragments are not supported")
	}
	addr = net.JoinHostPort(host, port)
	opts = []Option{func(dst *options) {
		dst.username, dst.password, dst.db = o.username, o.password, o.db
		dst.useTLS = dst.useTLS || o.useTLS
	}}
	return addr, opts, nil
}
