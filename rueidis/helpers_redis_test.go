package rueidis

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// lockTimeout is the per-master timeout of the tests' clients.
const lockTimeout = 200 * time.Millisecond

// masters is n real redis-server masters, a rueidis client for each
// (wrapped in a counting middleware), closed by t.Cleanup.
type masters struct {
	servers []*redistest.Server
	clients []lib.Client
	seen    []*counting
}

func startMasters(t *testing.T, n int) *masters {
	t.Helper()
	ms := &masters{servers: redistest.Start(t, n)}
	for _, s := range ms.servers {
		ms.clients = append(ms.clients, dial(t, s.Addr()))
		ms.seen = append(ms.seen, ms.clients[len(ms.clients)-1].(*counting))
	}
	return ms
}

// dial returns a client of addr wrapped in a counting middleware, closed
// by t.Cleanup.
func dial(t *testing.T, addr string, opt ...func(*lib.ClientOption)) lib.Client {
	t.Helper()
	o := lib.ClientOption{InitAddress: []string{addr}, DisableCache: true}
	for _, f := range opt {
		f(&o)
	}
	c, err := lib.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &counting{Client: c, n: make(map[string]int)}
}

// counting is a middleware around a client, as a hook would be: it counts
// the commands it is asked to run, by name.
type counting struct {
	lib.Client
	mu sync.Mutex
	n  map[string]int
}

func (c *counting) count(cs ...lib.Completed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cs {
		c.n[strings.ToLower(cmd.Commands()[0])]++
	}
}

func (c *counting) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func (c *counting) Do(ctx context.Context, cmd lib.Completed) lib.RedisResult {
	c.count(cmd)
	return c.Client.Do(ctx, cmd)
}

func (c *counting) DoMulti(ctx context.Context, cmds ...lib.Completed) []lib.RedisResult {
	c.count(cmds...)
	return c.Client.DoMulti(ctx, cmds...)
}

func newClient(t *testing.T, clients []lib.Client, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := New(clients, append([]redlock.Option{redlock.WithTimeout(lockTimeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dialB is dial for a benchmark.
func dialB(b *testing.B, addr string) lib.Client {
	b.Helper()
	c, err := lib.NewClient(lib.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// testingProcs is GOMAXPROCS, which RunParallel multiplies its
// parallelism by.
func testingProcs() int { return runtime.GOMAXPROCS(0) }
