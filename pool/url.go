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
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included: keep only
		// the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", nil, bad("%v", redact(err.Error(), rawURL))
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
			return "", nil, bad("user %q has no password (write redis://user:password@host or redis://:password@host)", o.username)
		}
		o.password = pw
	}
	switch path := strings.TrimPrefix(u.Path, "/"); path {
	case "":
	default:
		db, err := strconv.Atoi(path)
		if err != nil || db < 0 {
			return "", nil, bad("database %q is not a number >= 0", path)
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

// redact removes the URL's user information from msg, in case a parser
// quoted part of it.
func redact(msg, rawURL string) string {
	at := strings.LastIndex(rawURL, "@")
	if at < 0 {
		return msg
	}
	start := strings.Index(rawURL, "://")
	if start < 0 {
		start = 0
	} else {
		start += 3
	}
	if start >= at {
		return msg
	}
	info := rawURL[start:at]
	if i := strings.Index(info, ":"); i >= 0 {
		if pw := info[i+1:]; pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return msg
}
