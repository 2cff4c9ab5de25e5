package election_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// exampleMasters are three redis-server processes on 127.0.0.1 that the
// examples use; tests start their own.
var exampleMasters []string

func TestMain(m *testing.M) { os.Exit(redistest.RunWithExamples(m, &exampleMasters)) }

// realTimeout is generous: tests run under -race on two loaded cores, and
// no test here depends on a master timing out except where it is paused.
const realTimeout = 500 * time.Millisecond

// A connPath is one of the two ways a Client of redigo pools carries its
// commands to a master: pipelined or pooled. Every test whose behaviour
// depends on the path runs on both, through forEachPath.
type connPath struct {
	name      string
	pipelined bool
}

var (
	pipelinedPath = connPath{"pipelined", true}
	pooledPath    = connPath{"pooled", false}
)

func (p connPath) String() string { return p.name }

// forEachPath runs f as the subtests "pipelined" and "pooled".
func forEachPath(t *testing.T, f func(t *testing.T, path connPath)) {
	t.Helper()
	for _, p := range []connPath{pipelinedPath, pooledPath} {
		t.Run(p.name, func(t *testing.T) { f(t, p) })
	}
}

// testOptions adds the tests' per-master timeout before opts and path's
// option after them.
func testOptions(path connPath, opts []redlock.Option) []redlock.Option {
	return append(append([]redlock.Option{redlock.WithTimeout(realTimeout)}, opts...), redigo.WithPipelining(path.pipelined))
}

type realSet struct {
	servers []*redistest.Server
	pools   []pool.Pool
}

func startReal(t *testing.T, n int, opts ...redistest.Option) *realSet {
	t.Helper()
	rs := &realSet{servers: redistest.Start(t, n, opts...)}
	for _, s := range rs.servers {
		rs.pools = append(rs.pools, s.Pool())
	}
	return rs
}

// client is a client of rs's masters on path, closed at the test's end.
func (rs *realSet) client(t *testing.T, path connPath, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redigo.New(rs.pools, testOptions(path, opts)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// addrClient is realSet.client for masters given by address or URL.
func addrClient(t *testing.T, path connPath, addrs []string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redigo.NewFromAddrs(addrs, testOptions(path, opts)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newElection(t *testing.T, c *redlock.Client, key string, opts ...election.Option) *election.Election {
	t.Helper()
	e, err := election.New(c, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, what, cond)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 2*time.Second, what, cond)
}

// aclUser makes the user name with rules on every server and returns a
// redis:// URL of each server for it.
func aclUser(t *testing.T, servers []*redistest.Server, name, rules string) []string {
	t.Helper()
	var urls []string
	for _, s := range servers {
		args := []any{"SETUSER", name, "reset"}
		pw := ""
		for _, r := range strings.Fields(rules) {
			args = append(args, r)
			if strings.HasPrefix(r, ">") {
				pw = r[1:]
			}
		}
		if _, err := s.Do("ACL", args...); err != nil {
			t.Fatalf("ACL SETUSER %s: %v", rules, err)
		}
		urls = append(urls, fmt.Sprintf("redis://%s:%s@%s", name, pw, s.Addr()))
	}
	return urls
}

// minimalACL is the ACL rule set docs/operations.md gives a lock user,
// for keys starting with lock: (redlock's tests check it for every lock
// kind and option).
const minimalACL = `on >lock-user-secret resetkeys ~lock:* ~{lock:* resetchannels &quorumlock:released:lock:* -@all ` +
	`+ping +set +get +del +exists +pexpire +pexpireat +publish +time +hset +hget +hdel +hexists +hgetall ` +
	`+zadd +zrem +zrange +zrangebyscore +evalsha +eval +script|load +subscribe +unsubscribe`
