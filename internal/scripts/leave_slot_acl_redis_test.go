package scripts_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
)

// On a Redis Cluster node that serves every slot (so it checks the slots
// of a script's keys), the fair scripts run with the lock key and its
// queue companions for keys with and without a hash tag, and the leave of
// the head of a free key announces itself there: its three keys share a
// slot. A leave given a lock key of another slot is refused (CROSSSLOT),
// so the node does check.
func TestLeave_keysShareTheLockKeysSlotOnAClusterNode(t *testing.T) {
	node := redistest.StartOne(t, redistest.WithConfig("cluster-enabled", "yes"))
	if _, err := node.Do("CLUSTER", "ADDSLOTSRANGE", 0, 16383); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 5*time.Second, "the one-node cluster is up", func() bool {
		s, err := redis.String(node.Do("CLUSTER", "INFO"))
		return err == nil && strings.Contains(s, "cluster_state:ok")
	})
	c := conn(t, node)
	sub := conn(t, node)
	psc := redis.PubSubConn{Conn: sub}
	for _, key := range []string{"lock:job", "{lock:user1}:cart", "lock:a{b}c", "lock:with space"} {
		if !keys.SharesSlot(key) {
			t.Fatalf("%q: its companions are not in its slot", key)
		}
		ch := layout.WakeChannel(key)
		if err := psc.Subscribe(ch); err != nil {
			t.Fatal(err)
		}
		if _, ok := psc.ReceiveWithTimeout(timeout).(redis.Subscription); !ok {
			t.Fatal("no subscription")
		}
		q, d := layout.QueueKey(key), layout.QueueDeadlinesKey(key)
		if _, err := c.Do("SET", key, "holder", "PX", 30000); err != nil {
			t.Fatal(err)
		}
		for i, w := range []string{"waiter-a", "waiter-b"} {
			if n, err := redis.Int(redigot.Do(scripts.FairAcquire, c, timeout, key, q, d, "tok-"+w, 30000, w, i+1, 30000)); err != nil || n != 0 {
				t.Fatalf("%q: %s queued behind the holder: %d, %v", key, w, n, err)
			}
		}
		if _, err := c.Do("DEL", key); err != nil {
			t.Fatal(err)
		}
		if n, err := redis.Int(redigot.Do(scripts.Leave, c, timeout, q, d, key, "waiter-a", ch)); err != nil || n != 1 {
			t.Fatalf("%q: the head's leave: %d, %v", key, n, err)
		}
		switch m := psc.ReceiveWithTimeout(timeout).(type) {
		case redis.Message:
			if string(m.Data) != "waiter-a"[:8] || m.Channel != ch {
				t.Fatalf("%q: notice %q on %q", key, m.Data, m.Channel)
			}
		default:
			t.Fatalf("%q: no notice of the head's leave: %v", key, m)
		}
		if n, err := redis.Int(redigot.Do(scripts.FairRelease, c, timeout, key, q, d, "none", "", "waiter-b")); err != nil || n != 0 {
			t.Fatalf("%q: the last waiter's entry out: %d, %v", key, n, err)
		}
		if err := psc.Unsubscribe(ch); err != nil {
			t.Fatal(err)
		}
		if _, ok := psc.ReceiveWithTimeout(timeout).(redis.Subscription); !ok {
			t.Fatal("no unsubscription")
		}
	}
	q, d := layout.QueueKey("lock:job"), layout.QueueDeadlinesKey("lock:job")
	if keys.Slot("lock:other") == keys.Slot("lock:job") {
		t.Fatal("the control keys share a slot")
	}
	_, err := redigot.Do(scripts.Leave, c, timeout, q, d, "lock:other", "waiter-a", "")
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a leave across slots: %v, want CROSSSLOT", err)
	}
}

// documentedACL is the lock user's ACL as docs/operations.md gives it,
// read from the document (its PASSWORD replaced).
func documentedACL(t *testing.T) []any {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "ACL SETUSER locker ")
	if i < 0 {
		t.Fatal("docs/operations.md gives no ACL SETUSER locker")
	}
	s = s[i+len("ACL SETUSER locker "):]
	s = s[:strings.Index(s, "```")]
	s = strings.ReplaceAll(s, "\\\n", " ")
	args := []any{"SETUSER", "locker", "reset"}
	for _, f := range strings.Fields(s) {
		if f == ">PASSWORD" {
			f = ">secret"
		}
		args = append(args, f)
	}
	return args
}

// A lock user with exactly the documented ACL runs the fair scripts and
// the leave that announces the head's departure from a free key's queue
// (ZRANGE, EXISTS, PUBLISH on the key's channel): no refusal.
func TestLeave_documentedACLRunsTheAnnouncingLeave(t *testing.T) {
	srv := redistest.StartOne(t)
	if _, err := srv.Do("ACL", documentedACL(t)...); err != nil {
		t.Fatal(err)
	}
	dial := func() redis.Conn {
		c, err := redis.Dial("tcp", srv.Addr(), redis.DialUsername("locker"), redis.DialPassword("secret"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := dial()
	psc := redis.PubSubConn{Conn: dial()}
	const key = "lock:fair"
	ch := layout.WakeChannel(key)
	if err := psc.Subscribe(ch); err != nil {
		t.Fatal(err)
	}
	if _, ok := psc.ReceiveWithTimeout(timeout).(redis.Subscription); !ok {
		t.Fatal("no subscription")
	}
	q, d := layout.QueueKey(key), layout.QueueDeadlinesKey(key)
	if _, err := srv.Do("SET", key, "holder", "PX", 30000); err != nil {
		t.Fatal(err)
	}
	for i, w := range []string{"waiter-a", "waiter-b"} {
		if n, err := redis.Int(redigot.Do(scripts.FairAcquire, c, timeout, key, q, d, "tok-"+w, 30000, w, i+1, 30000)); err != nil || n != 0 {
			t.Fatalf("%s queued behind the holder: %d, %v", w, n, err)
		}
	}
	if _, err := srv.Do("DEL", key); err != nil {
		t.Fatal(err)
	}
	if n, err := redis.Int(redigot.Do(scripts.Leave, c, timeout, q, d, key, "waiter-a", ch)); err != nil || n != 1 {
		t.Fatalf("the head's leave as the lock user: %d, %v", n, err)
	}
	if m, ok := psc.ReceiveWithTimeout(timeout).(redis.Message); !ok || string(m.Data) != "waiter-a"[:8] {
		t.Fatalf("no notice of the head's leave: %v", m)
	}
	if n, err := redis.Int(redigot.Do(scripts.FairAcquire, c, timeout, key, q, d, "tok-b", 30000, "waiter-b", 2, 30000)); err != nil || n != 1 {
		t.Fatalf("the next waiter's attempt as the lock user: %d, %v", n, err)
	}
	if n, err := redis.Int(redigot.Do(scripts.FairRelease, c, timeout, key, q, d, "tok-b", ch, "waiter-b")); err != nil || n != 1 {
		t.Fatalf("its release as the lock user: %d, %v", n, err)
	}
	if log, err := redis.Values(srv.Do("ACL", "LOG")); err != nil || len(log) != 0 {
		t.Fatalf("ACL LOG: %d entries, %v", len(log), err)
	}
}
