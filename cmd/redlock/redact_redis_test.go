package main

import (
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Credentials never show in the output of doctor, status or exec, whatever
// the masters echo: a real master whose AUTH was renamed away quotes the
// AUTH arguments in its error, and a hostile one puts the password in
// every reply.
func TestRedact_credentialsNeverShow(t *testing.T) {
	const user, secret = "locker", "RealPw99"
	real := redistest.Start(t, 3)
	for _, s := range real {
		if _, err := s.Do("ACL", "SETUSER", user, "on", ">"+secret, "~*", "&*", "+@all"); err != nil {
			t.Fatal(err)
		}
	}
	renamed := redistest.StartOne(t, redistest.WithArgs("--rename-command", "AUTH", ""))
	echo := hostile.Start(t, func(w io.Writer, cmd []string, _ <-chan struct{}) error {
		var reply string
		switch cmd[0] {
		case "AUTH", "PING":
			reply = "+OK\r\n"
		case "INFO":
			body := "redis_version:" + secret + "\r\nrole:" + user + "\r\n"
			reply = "$" + itoa(len(body)) + "\r\n" + body + "\r\n"
		case "TYPE":
			reply = "+string\r\n"
		case "PTTL":
			reply = ":9000\r\n"
		case "GET":
			reply = "$" + itoa(len(secret)+3) + "\r\n" + secret + "-xy\r\n"
		default:
			reply = "-ERR " + strings.Join(cmd, " ") + " " + secret + "\r\n"
		}
		_, err := io.WriteString(w, reply)
		return err
	})
	var masters []string
	for _, a := range []string{real[0].Addr(), renamed.Addr(), echo, real[1].Addr(), real[2].Addr()} {
		masters = append(masters, "redis://"+user+":"+secret+"@"+a)
	}
	for _, args := range [][]string{
		{"doctor"}, {"status", "k"}, {"exec", "k", "--", "true"},
		{"exec", "k", "--", "sh", "-c", "echo ran"},
	} {
		code, out, errOut := redlockRun(t, masters, args...)
		all := out + errOut
		t.Logf("%v: exit %d\n%s", args, code, all)
		if strings.Contains(all, secret) || strings.Contains(all, "'"+user+"'") || strings.Contains(all, ":"+user) {
			t.Errorf("%v shows the credentials:\n%s", args, all)
		}
		if args[0] == "exec" && code != 0 {
			t.Errorf("%v: exit %d with a quorum of healthy masters", args, code)
		}
	}
	// With too few healthy masters, the error explains every failure,
	// without the credentials.
	code, out, errOut := redlockRun(t, masters[:3], "exec", "k", "--", "true")
	if code == 0 || !strings.Contains(errOut, "unknown command") || strings.Contains(out+errOut, secret) {
		t.Errorf("exit %d:\n%s%s", code, out, errOut)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
