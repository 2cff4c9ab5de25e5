package goredis

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

type notices struct {
	mu  sync.Mutex
	got []string
	ch  chan struct{}
}

func newNotices() *notices { return &notices{ch: make(chan struct{}, 100)} }

func (n *notices) notify(channel, payload string) {
	n.mu.Lock()
	n.got = append(n.got, channel+"="+payload)
	n.mu.Unlock()
	select {
	case n.ch <- struct{}{}:
	default:
	}
}

func (n *notices) list() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.got...)
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	waitForWithin(t, 5*time.Second, what, f)
}

// subs returns a WaitGroup for subscriptions' goroutines, waited for by
// t.Cleanup.
func subs(t *testing.T) *sync.WaitGroup {
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	return &wg
}

func TestSubscription_liveChannelsGetNotices(t *testing.T) {
	ctx := context.Background()
	s := startServer(t)
	c := newClient(t, s)
	n := newNotices()
	sub, err := subscribe(ctx, c, s.addr, n.notify, subs(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.close()
	if sub.live("a") {
		t.Fatal("live before any SUBSCRIBE")
	}
	if err := sub.set(ctx, []string{"a", "b", "a"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a and b live", func() bool { return sub.live("a") && sub.live("b") })
	c.Publish(ctx, "a", "1")
	c.Publish(ctx, "c", "ignored")
	c.Publish(ctx, "b", "2")
	eventually(t, "two notices", func() bool { return len(n.list()) == 2 })
	if got := strings.Join(n.list(), ","); got != "a=1,b=2" {
		t.Fatalf("notices %s", got)
	}
	if err := sub.set(ctx, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if sub.live("a") {
		t.Fatal("a live right after it was dropped")
	}
	// Dropped then asked again: live only once both are acknowledged.
	if err := sub.set(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a live again", func() bool { return sub.live("a") })
	if n, _ := c.PubSubNumSub(ctx, "a", "b").Result(); n["a"] != 1 || n["b"] != 1 {
		t.Fatalf("the master counts %v subscribers", n)
	}
	select {
	case <-sub.done:
		t.Fatal("done while healthy")
	default:
	}
}

func TestSubscription_endsWhenTheConnectionBreaks(t *testing.T) {
	ctx := context.Background()
	s := startServer(t)
	c := newClient(t, s)
	sub, err := subscribe(ctx, c, s.addr, newNotices().notify, subs(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.close()
	if err := sub.set(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a live", func() bool { return sub.live("a") })
	if err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.done:
	case <-time.After(5 * time.Second):
		t.Fatal("not done after the master closed the connection")
	}
	if sub.live("a") {
		t.Fatal("live on a broken subscription")
	}
	if err := sub.set(ctx, []string{"b"}); err == nil {
		t.Fatal("set on a broken subscription succeeded")
	}
}

func TestSubscription_failsOnADownMaster(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	s.stop()
	defer s.cont()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := subscribe(ctx, c, s.addr, newNotices().notify, subs(t)); err == nil {
		t.Fatal("subscribed to a frozen master")
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("subscribe took %v with a 200ms context", el)
	}
}

// fakeMaster answers a PING, then what reply says, on each connection.
func fakeMaster(t *testing.T, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				rd := bufio.NewReader(nc)
				_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
				for {
					line, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					switch l := strings.ToLower(line); {
					case strings.HasPrefix(l, "ping"):
						_, _ = nc.Write([]byte("+PONG\r\n" + reply))
					case strings.HasPrefix(l, "hello"), strings.HasPrefix(l, "client"):
						_, _ = nc.Write([]byte("-ERR unknown command\r\n"))
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestSubscription_malformedReplyEndsIt(t *testing.T) {
	for name, reply := range map[string]string{
		"array of an integer": "*1\r\n:1\r\n",
		"short subscribe":     "*2\r\n$9\r\nsubscribe\r\n$1\r\na\r\n",
		"unasked ack":         "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n",
		"integer":             ":7\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			addr := fakeMaster(t, reply)
			c := newClient(t, &server{addr: addr}, func(o *redis.Options) { o.Protocol = 2 })
			sub, err := subscribe(context.Background(), c, addr, newNotices().notify, subs(t))
			if err != nil {
				return // refused at once: fine too
			}
			defer sub.close()
			select {
			case <-sub.done:
			case <-time.After(5 * time.Second):
				t.Fatal("a malformed reply did not end the subscription")
			}
		})
	}
}
