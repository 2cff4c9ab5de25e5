package pool_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/pool"
)

// FuzzParseURL: any string either parses to a host:port, or fails with
// ErrBadURL; a password of some length in the input never shows in the
// error.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379", "rediss://user:pw@host:1/2", "redis://:secret@h", "redis://h:0",
		"redis://[::1]:6380/15", "redis://u:p@h:1?x=y", "redis://%zz", "redis://user:@h", "http://h", "",
		"redis://u:secret123@h:port%zz", "redis://u:secret123@[::1", "redis://u:secret123@h:99999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		addr, _, err := pool.ParseURL(raw)
		if err != nil {
			if !errors.Is(err, pool.ErrBadURL) {
				t.Fatalf("ParseURL(%q): %v does not match ErrBadURL", raw, err)
			}
			// (A password that also appears elsewhere in the input, in
			// the scheme or host, may show through that part.)
			if pw := password(raw); len(pw) >= 6 && strings.Count(raw, pw) == 1 && strings.Contains(err.Error(), pw) {
				t.Fatalf("ParseURL(%q): the error shows the password: %v", raw, err)
			}
			return
		}
		if addr == "" || !strings.Contains(addr, ":") {
			t.Fatalf("ParseURL(%q) = %q, no host:port", raw, addr)
		}
	})
}

// password returns what the input holds as a password: what a URL
// parser takes, or, for input it rejects, the text between the user's
// colon and the last '@'.
func password(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if u.User == nil {
			return "" // an '@' in the path is no password
		}
		pw, _ := u.User.Password()
		return pw
	}
	start, at := strings.Index(raw, "://"), strings.LastIndex(raw, "@")
	if start < 0 || at < start+3 {
		return ""
	}
	info := raw[start+3 : at]
	if i := strings.Index(info, ":"); i >= 0 {
		return info[i+1:]
	}
	return ""
}
