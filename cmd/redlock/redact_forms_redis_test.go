package main

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A hostile master puts the password where doctor, status and exec print
// what it sent: quoted with escapes (a role of `"` and `\`), cut short (a
// long token), in an array. The password, URL-escaped in --masters,
// never shows in any form.
func TestRedact_attackForms(t *testing.T) {
	const user = "locker"
	secret := `Pw"7\x/y#z@` + strings.Repeat("Q", 30)
	real := redistest.Start(t, 3)
	for _, s := range real {
		if _, err := s.Do("ACL", "SETUSER", user, "on", ">"+secret, "~*", "&*", "+@all"); err != nil {
			t.Fatal(err)
		}
	}
	bulk := func(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }
	echo := hostile.Start(t, func(w io.Writer, cmd []string, _ <-chan struct{}) error {
		var reply string
		switch cmd[0] {
		case "AUTH", "PING":
			reply = "+OK\r\n"
		case "INFO":
			reply = bulk("redis_version:7.2.0\r\nrole:" + secret + "\r\n")
		case "TYPE":
			reply = "+string\r\n"
		case "PTTL":
			reply = ":9000\r\n"
		case "GET":
			reply = bulk(secret)
		case "CONFIG":
			reply = "*4\r\n" + bulk("appendfsync") + bulk(secret) + bulk("maxmemory-policy") + bulk(secret)
		default:
			reply = "*2\r\n" + bulk(secret) + bulk(secret)
		}
		_, err := io.WriteString(w, reply)
		return err
	})
	var masters []string
	for _, a := range []string{real[0].Addr(), echo, real[1].Addr(), real[2].Addr()} {
		masters = append(masters, "redis://"+user+":"+url.QueryEscape(secret)+"@"+a)
	}
	q := strconv.Quote(secret)
	forms := map[string]string{
		"as it is": secret, "quoted": q[1 : len(q)-1], "cut short": secret[:8],
		"as decimal bytes": strings.Trim(fmt.Sprint([]byte(secret)), "[]"),
		"URL-escaped":      url.QueryEscape(secret),
	}
	for _, args := range [][]string{{"doctor"}, {"status", "k"}, {"exec", "k", "--", "true"}} {
		for _, ms := range [][]string{masters, masters[:2]} {
			code, out, errOut := redlockRun(t, ms, args...)
			all := out + errOut
			for how, s := range forms {
				if strings.Contains(all, s) {
					t.Errorf("%v with %d masters (exit %d) shows the password %s:\n%s", args, len(ms), code, how, all)
				}
			}
		}
	}
}
