package resp

import (
	"strings"
	"testing"
)

// replyError stands for a transport's error reply: a string type, not a
// string.
type replyError string

// The INFO server reply is untrusted: only a run_id of 40 lowercase hex
// digits, in a reply of bounded size, identifies a master.
func TestRunID_untrustedReplies(t *testing.T) {
	good := strings.Repeat("0123456789abcdef", 3)[:40]
	for name, tc := range map[string]struct {
		reply any
		want  string
	}{
		"a server's":          {[]byte("# Server\r\nredis_version:7.0.15\r\nrun_id:" + good + "\r\ntcp_port:6379\r\n"), good},
		"last line":           {[]byte("run_id:" + good), good},
		"too short":           {[]byte("run_id:" + good[:39] + "\r\n"), ""},
		"too long":            {[]byte("run_id:" + good + "0\r\n"), ""},
		"upper case":          {[]byte("run_id:" + strings.ToUpper(good) + "\r\n"), ""},
		"escape sequence":     {[]byte("run_id:" + good[:38] + "\x1b[\r\n"), ""},
		"none":                {[]byte("# Server\r\nredis_version:7.0.15\r\n"), ""},
		"a string (go-redis)": {"# Server\r\nrun_id:" + good + "\r\n", good},
		"oversized string":    {"run_id:" + good + "\r\n" + strings.Repeat("x", MaxInfoReply), ""},
		"not a bulk string":   {int64(1), ""},
		"an array":            {[]any{[]byte("run_id:" + good)}, ""},
		"an error reply":      {replyError("NOPERM this user has no permissions to run the 'info' command"), ""},
		"nil":                 {nil, ""},
		"oversized":           {[]byte("run_id:" + good + "\r\n" + strings.Repeat("x", MaxInfoReply)), ""},
	} {
		if got := RunID(tc.reply); got != tc.want {
			t.Errorf("%s: RunID = %q, want %q", name, got, tc.want)
		}
	}
}
