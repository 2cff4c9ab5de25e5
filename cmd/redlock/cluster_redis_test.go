package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestParseClusterMember(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "cluster://127.0.0.1:7000", want: "127.0.0.1:7000"},
		{in: "cluster://127.0.0.1:7000+localhost:7001+[::1]:7002", want: "127.0.0.1:7000 localhost:7001 [::1]:7002"},
		{in: "cluster://", err: "not host:port"},
		{in: "cluster://127.0.0.1", err: "not host:port"},
		{in: "cluster://127.0.0.1:0", err: "port is not 1..65535"},
		{in: "cluster://127.0.0.1:7000+", err: "not host:port"},
		{in: "cluster://h\x1bx:7000", err: "not a host name"},
		{in: "cluster://user:secret@127.0.0.1:7000", err: "no credentials"},
		{in: "cluster://" + strings.Repeat("127.0.0.1:1+", 64) + "127.0.0.1:1", err: "at most 64"},
	} {
		m, err := parseClusterMember(tc.in, nil)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error with %q", tc.in, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%q: the error shows the password: %v", tc.in, err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case strings.Join(m.seeds, " ") != tc.want:
			t.Errorf("%q: seeds %q, want %s", tc.in, m.seeds, tc.want)
		}
	}
}

// CLUSTER SLOTS comes from a node: every slot number, host and port in it
// is checked before status or doctor dials it.
func TestParseSlots_untrustedReplies(t *testing.T) {
	primary := func(host any, port any) []any {
		return []any{host, port, []byte("0123456789012345678901234567890123456789")}
	}
	entry := func(lo, hi any, p []any) []any { return []any{lo, hi, p} }
	good, err := parseSlots([]any{
		entry(int64(0), int64(8191), primary([]byte("127.0.0.1"), int64(7000))),
		entry(int64(8192), int64(16383), primary([]byte(""), int64(7001))), // "": the sender's host
	}, "10.0.0.9:7005")
	if err != nil || len(good) != 2 || good[0].addr != "127.0.0.1:7000" || good[1].addr != "10.0.0.9:7001" || good[0].id == "" {
		t.Fatalf("a good reply: %+v, %v", good, err)
	}
	for name, tc := range map[string]struct {
		reply any
		err   string
	}{
		"not an array":      {[]byte("x"), "CLUSTER SLOTS"},
		"short entry":       {[]any{[]any{int64(0), int64(1)}}, "not [start, end, primary"},
		"slot past 16383":   {[]any{entry(int64(0), int64(16384), primary([]byte("h"), int64(1)))}, "not a slot range"},
		"negative slot":     {[]any{entry(int64(-1), int64(3), primary([]byte("h"), int64(1)))}, "not a slot range"},
		"end before start":  {[]any{entry(int64(9), int64(3), primary([]byte("h"), int64(1)))}, "not a slot range"},
		"port 0":            {[]any{entry(int64(0), int64(3), primary([]byte("h"), int64(0)))}, "port is not"},
		"port too big":      {[]any{entry(int64(0), int64(3), primary([]byte("h"), int64(70000)))}, "port is not"},
		"escape in host":    {[]any{entry(int64(0), int64(3), primary([]byte("h\x1b]0;x\a"), int64(1)))}, "not a host name"},
		"host with a path":  {[]any{entry(int64(0), int64(3), primary([]byte("h/x"), int64(1)))}, "not a host name"},
		"unknown endpoint":  {[]any{entry(int64(0), int64(3), primary([]byte("?"), int64(1)))}, "endpoint is unknown"},
		"host not a string": {[]any{entry(int64(0), int64(3), primary([]any{}, int64(1)))}, "not [host, port"},
		"too many ranges":   {make([]any, clusterSlots+1), "more than there are slots"},
	} {
		_, err := parseSlots(tc.reply, "h:1")
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.err)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\x1b\a") {
			t.Errorf("%s: the error carries control characters: %q", name, err)
		}
	}
}

func TestMoved(t *testing.T) {
	for _, tc := range []struct {
		err  error
		slot int
		want string
	}{
		{redis.Error("MOVED 3999 127.0.0.1:6381"), 3999, "127.0.0.1:6381"},
		{errors.New(`redlock: master 0 (127.0.0.1:7000): MOVED 3999 127.0.0.1:6381`), 3999, "127.0.0.1:6381"},
		{redis.Error("MOVED 4000 127.0.0.1:6381"), 3999, ""}, // another slot
		{redis.Error("MOVED 3999 127.0.0.1:0"), 3999, ""},
		{redis.Error("MOVED 3999 evil\x1b:1"), 3999, ""},
		{redis.Error("ASK 3999 127.0.0.1:6381"), 3999, ""},
		{nil, 1, ""},
	} {
		if got := moved(tc.err, tc.slot); got != tc.want {
			t.Errorf("moved(%v, %d) = %q, want %q", tc.err, tc.slot, got, tc.want)
		}
	}
}

// A cluster member that is not host:port seeds is bad usage for every
// command, before anything is dialed.
func TestRun_clusterMembersRefused(t *testing.T) {
	for _, tc := range []struct {
		masters string
		args    []string
		want    string
	}{
		{"cluster://127.0.0.1:1+127.0.0.1", []string{"exec", "k", "--", "true"}, "not host:port"},
		{"127.0.0.1:1,cluster://127.0.0.1:2+127.0.0.1:0", []string{"bench"}, "port is not"},
		{"cluster://127.0.0.1", []string{"status", "k"}, "not host:port"},
		{"cluster://u:p@127.0.0.1:1", []string{"doctor"}, "no credentials"},
	} {
		code, _, errOut := redlockRun(t, strings.Split(tc.masters, ","), tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "redlock") > 2 {
			t.Errorf("%s %v: exit %d, stderr %q; want 64 and %q", tc.masters, tc.args, code, errOut, tc.want)
		}
	}
}

// A member given by loopback seeds dials only loopback addresses its
// cluster names; one given by other seeds dials no loopback address.
func TestClusterMember_dialable(t *testing.T) {
	local, err := parseClusterMember("cluster://127.0.0.1:7000+localhost:7001+[::1]:7002", nil)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := parseClusterMember("cluster://10.0.0.1:7000", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		m    *clusterMember
		addr string
		ok   bool
	}{
		{local, "127.0.0.1:7005", true},
		{local, "127.0.0.2:7005", true},
		{local, "[::1]:7005", true},
		{local, "172.18.0.3:6379", false},
		{local, "redis-node-1:6379", false},
		{remote, "10.0.0.2:7000", true},
		{remote, "127.0.0.1:7000", false},
		{remote, "localhost:7000", false},
	} {
		if err := tc.m.dialable(tc.addr); (err == nil) != tc.ok {
			t.Errorf("%s: dialable(%s) = %v, want ok %v", tc.m.spec, tc.addr, err, tc.ok)
		}
	}
}

// A member written cluster:// whose seed is a standalone server: status
// and doctor say the server has no cluster support, and status counts the
// member as not answering.
func TestClusterMember_seedNotACluster(t *testing.T) {
	srv := redistest.StartOne(t)
	member := "cluster://" + srv.Addr()
	code, out, errOut := redlockRun(t, []string{member}, "status", "k")
	if code != exitUnavailable || !strings.Contains(out, "cluster support disabled") {
		t.Errorf("status: exit %d, want %d and the seed's refusal:\n%s%s", code, exitUnavailable, out, errOut)
	}
	code, out, errOut = redlockRun(t, []string{member}, "doctor")
	if code != exitFailure || !strings.Contains(out, "FAIL: cluster "+member+": no seed told the slots' owners") ||
		!strings.Contains(out, "cluster support disabled") {
		t.Errorf("doctor: exit %d, want %d and the seed's refusal:\n%s%s", code, exitFailure, out, errOut)
	}
}
