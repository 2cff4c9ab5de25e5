package slots_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/slots"
)

// Redirections are untrusted bytes: only MOVED/ASK with a slot below 16384
// and a host:port with a valid port are followed; the rest is an error
// that quotes nothing raw.
func TestParseRedirect(t *testing.T) {
	for _, tc := range []struct {
		msg, sender string
		ask, ok     bool
		slot        int
		addr, err   string
	}{
		{msg: "MOVED 3999 127.0.0.1:6381", ok: true, slot: 3999, addr: "127.0.0.1:6381"},
		{msg: "ASK 0 [::1]:7000", ok: true, ask: true, slot: 0, addr: "[::1]:7000"},
		{msg: "MOVED 12 :7001", sender: "127.0.0.1:7000", ok: true, slot: 12, addr: "127.0.0.1:7001"},
		{msg: "ERR unknown command"},
		{msg: "TRYAGAIN Multiple keys request during rehashing of slot"},
		{msg: "MOVED 16384 127.0.0.1:1", ok: true, err: "slot 16384"},
		{msg: "MOVED 1 127.0.0.1:0", ok: true, err: "port is not"},
		{msg: "MOVED 1 evil\x1b]0;x\a:1", ok: true, err: "not host:port"},
		{msg: "MOVED 1 h/x:1", ok: true, err: "not a host name"},
		{msg: "MOVED x 127.0.0.1:1", ok: true, err: "malformed"},
		{msg: "MOVED 1 " + strings.Repeat("a", 400) + ":1", ok: true, err: "malformed"},
	} {
		ask, slot, addr, ok, err := slots.ParseRedirect(tc.msg, tc.sender)
		if ok != tc.ok || (tc.err == "" && (err != nil || ask != tc.ask || slot != tc.slot || addr != tc.addr)) {
			t.Errorf("%.40q: ask %v slot %d addr %q ok %v err %v", tc.msg, ask, slot, addr, ok, err)
			continue
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, slots.ErrBadCluster)) {
			t.Errorf("%.40q: %v, want an error with %q", tc.msg, err, tc.err)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\x1b\a") {
			t.Errorf("%.40q: the error carries control characters: %q", tc.msg, err)
		}
	}
}

// A CLUSTER SLOTS reply naming more than MaxClusterNodes primaries is
// refused: the client would keep a pool and a connection per node.
func TestParseClusterSlots_tooManyNodes(t *testing.T) {
	var reply []any
	for i := 0; i <= slots.MaxClusterNodes; i++ {
		reply = append(reply, []any{int64(i), int64(i), []any{[]byte("127.0.0.1"), int64(10000 + i)}})
	}
	if _, err := slots.ParseClusterSlots(reply[:slots.MaxClusterNodes], "127.0.0.1:1"); err != nil {
		t.Fatalf("%d primaries: %v", slots.MaxClusterNodes, err)
	}
	_, err := slots.ParseClusterSlots(reply, "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d primaries", slots.MaxClusterNodes)) {
		t.Fatalf("%d primaries: %v", len(reply), err)
	}
}
