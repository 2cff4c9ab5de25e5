// Command demo shows the Redlock quorum at work.
//
// With REDLOCK_MASTERS unset it starts five throwaway redis-server
// processes on 127.0.0.1 and walks through: workers racing for one key,
// a paused master and a killed master that locking survives, and a lost
// majority that makes acquisition fail with a clear message. With
// REDLOCK_MASTERS set (comma-separated host:port or redis:// URLs) it runs
// only the race against those masters and injects no faults.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/masters"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func main() {
	log.SetFlags(0)
	if err := demo(); err != nil {
		log.Fatal(err)
	}
}

// demo races on $REDLOCK_MASTERS, or shows the quorum at work on five
// throwaway masters, stopped before it returns.
func demo() error {
	if addrs := masters.FromEnv(); len(addrs) > 0 {
		c, err := redigo.NewFromAddrs(addrs)
		if err != nil {
			return err
		}
		defer c.Close()
		race(c, len(addrs))
		return nil
	}

	servers, stop := launch()
	defer stop()
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	fmt.Println("masters:", strings.Join(addrs, " "))
	c, err := redigo.NewFromAddrs(addrs, redlock.WithTimeout(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer c.Close()

	fmt.Println("\n1. six workers race for one key; the quorum picks one winner")
	race(c, 5)

	fmt.Println("\n2. master 0 is paused (frozen: it accepts connections, never answers): locking goes on without waiting for it")
	must(servers[0].Pause())
	timed(c, "with 1 of 5 paused")
	fmt.Println("   master 1 is killed as well: 3 of 5 still make a quorum")
	must(servers[1].Kill())
	timed(c, "with 2 of 5 down")

	fmt.Println("\n3. master 2 is killed too: no majority is left")
	must(servers[2].Kill())
	_, err = c.TryAcquire(context.Background(), "demo:key")
	fmt.Println("   TryAcquire:", err)
	fmt.Println("   errors.Is(err, redlock.ErrNotAcquired):", errors.Is(err, redlock.ErrNotAcquired))

	fmt.Println("\n4. the masters come back and locking works again")
	must(servers[0].Resume())
	must(servers[1].Start())
	must(servers[2].Start())
	timed(c, "with all 5 back")
	fmt.Println("\nshutting down the masters.")
	return nil
}

// race runs six workers that each try once to take the same key.
func race(c *redlock.Client, n int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won *redlock.Lock
	winners := 0
	for w := 1; w <= 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.TryAcquire(ctx, "demo:race", redlock.WithTTL(5*time.Second))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				var qe *redlock.QuorumError
				if errors.As(err, &qe) {
					fmt.Printf("   worker %d lost: %d of %d masters granted it, quorum %d\n", w, qe.Succeeded, n, qe.Quorum)
				} else {
					fmt.Printf("   worker %d failed: %v\n", w, err)
				}
				return
			}
			winners++
			won = l
			fmt.Printf("   worker %d won, valid for %v\n", w, time.Until(l.Until()).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	fmt.Printf("   winners: %d\n", winners)
	if won != nil {
		if err := won.Release(ctx); err != nil {
			fmt.Println("   release:", err)
		}
	}
}

// timed takes and releases a lock and says how long that took.
func timed(c *redlock.Client, what string) {
	ctx := context.Background()
	start := time.Now()
	l, err := c.Acquire(ctx, "demo:key", redlock.WithTTL(5*time.Second), redlock.WithWait(5*time.Second))
	if err != nil {
		fmt.Println("   acquire failed:", err)
		return
	}
	err = l.Release(ctx)
	fmt.Printf("   acquire+release %s: %v (release error: %v)\n", what, time.Since(start).Round(10*time.Microsecond), err)
}

// launch starts five throwaway redis-server processes on 127.0.0.1. (The
// Docker harness, integration/cluster, is a module of its own so that the
// library's module does not require Docker's client; the demo needs only
// processes it can pause and kill.)
func launch() ([]*redistest.Server, func()) {
	fmt.Println("starting 5 throwaway redis-server masters on 127.0.0.1 ...")
	servers, stop, err := redistest.LaunchServers(5)
	if err != nil {
		log.Fatalf("%v\n(install Redis with: apt-get install -y redis-server)", err)
	}
	return servers, stop
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
