// Command leader runs three instances of a service of which one at a time
// is active, chosen by an election.Election, and shows what happens when the
// leader freezes (SIGSTOP) or dies (SIGKILL): another instance takes over
// with a higher term, and the store the leader writes to (fence.Store)
// refuses the writes of the frozen ex-leader when it wakes up, because
// they carry its old term (unless it was frozen with a write on its way:
// then it finds its leadership lost before writing again).
//
//	go run ./examples/leader      # on three throwaway local masters
//
// With REDLOCK_MASTERS set (comma-separated addresses or redis:// URLs)
// the instances use those masters, and the store lives on the first one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/examples/internal/procs"
	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/internal/masters"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
)

const (
	// instanceEnv, when set, makes the program one instance, named by it.
	instanceEnv = "LEADER_EXAMPLE_INSTANCE"
	electionKey = "examples:leader"
	dataKey     = "examples:leader:data"
	ttl         = time.Second
)

func main() {
	log.SetFlags(0)
	flag.Parse()
	if name := os.Getenv(instanceEnv); name != "" {
		os.Exit(instance(name, masters.FromEnv()))
	}
	if err := scenarioThrowaway(); err != nil {
		log.Fatal(err)
	}
}

// scenarioThrowaway runs the scenario on $REDLOCK_MASTERS, or on three
// throwaway masters stopped before it returns.
func scenarioThrowaway() error {
	addrs := masters.FromEnv()
	if len(addrs) == 0 {
		var stop func()
		var err error
		fmt.Println("starting 3 throwaway redis-server masters on 127.0.0.1 ...")
		if addrs, stop, err = redistest.Launch(3); err != nil {
			return fmt.Errorf("%w\n(install Redis with: apt-get install -y redis-server)", err)
		}
		defer stop()
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return scenario(ctx, os.Stdout, exe, addrs)
}

// instance is one instance of the service: it campaigns, and while leader
// writes "name term" to the store every 100 ms. It writes before it looks
// whether it is still leader, as a process that was frozen mid-loop would:
// only the store's check of the term stops that write. It exits on
// SIGTERM, resigning if it leads.
func instance(name string, addrs []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	c, err := redigo.NewFromAddrs(addrs)
	if err != nil {
		log.Print(err)
		return 1
	}
	defer c.Close()
	p, err := pool.New(addrs[0])
	if err != nil {
		log.Print(err)
		return 1
	}
	defer p.Close()
	store, err := fence.NewStore(p)
	if err != nil {
		log.Print(err)
		return 1
	}
	e, err := election.New(c, electionKey, election.WithTTL(ttl))
	if err != nil {
		log.Print(err)
		return 1
	}
	for ctx.Err() == nil {
		ld, err := e.Campaign(ctx, name)
		if err != nil {
			break
		}
		fmt.Printf("%s: elected, term %d\n", name, ld.Term())
		lead(ctx, name, ld, store)
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = ld.Resign(rctx)
		cancel()
	}
	return 0
}

// lead does the leader's work until the store refuses it, leadership is
// lost, or ctx ends.
func lead(ctx context.Context, name string, ld *election.Leadership, store *fence.Store) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		err := store.Set(wctx, dataKey, ld.Term(), []byte(fmt.Sprintf("%s %d", name, ld.Term())), time.Minute)
		cancel()
		var stale *fence.StaleError
		switch {
		case errors.As(err, &stale):
			fmt.Printf("%s: write with term %d refused: the store has seen term %d; stepping down\n", name, ld.Term(), stale.Highest)
			return
		case err != nil:
			fmt.Printf("%s: write failed: %v\n", name, err)
		}
		select {
		case <-ld.Lost():
			fmt.Printf("%s: leadership lost (%v)\n", name, ld.Err())
			return
		default:
		}
	}
}

// scenario starts three instances of exe, freezes the leader, wakes it
// up, then kills the next one, writing what happens to out. It returns an
// error when two leaders overlap in the store's eyes (a lower term written
// after a higher one), a frozen or killed leader is not replaced, or the
// woken ex-leader neither has its write refused nor finds its leadership
// lost.
func scenario(ctx context.Context, out io.Writer, exe string, addrs []string) error {
	c, err := redigo.NewFromAddrs(addrs)
	if err != nil {
		return err
	}
	defer c.Close()
	e, err := election.New(c, electionKey, election.WithTTL(ttl))
	if err != nil {
		return err
	}
	p, err := pool.New(addrs[0])
	if err != nil {
		return err
	}
	defer p.Close()
	store, err := fence.NewStore(p)
	if err != nil {
		return err
	}

	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	g, err := procs.Start(exe, []string{"a", "b", "c"}, func(name string) []string {
		return []string{instanceEnv + "=" + name, masters.Env + "=" + strings.Join(addrs, ",")}
	}, func(name, line string) { say("  [%s] %s", name, line) })
	if err != nil {
		return err
	}
	defer g.Stop()

	// waitLeader waits for a leader with a term above after, and for the
	// store to have seen its term.
	waitLeader := func(after uint64) (election.Leader, error) {
		for {
			if ld, err := e.Leader(ctx); err == nil && ld.Term > after {
				if h, err := store.Highest(ctx, dataKey); err == nil && h >= ld.Term {
					return ld, nil
				}
			}
			select {
			case <-ctx.Done():
				return election.Leader{}, fmt.Errorf("no new leader after term %d: %w", after, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	first, err := waitLeader(0)
	if err != nil {
		return err
	}
	say("leader: %s, term %d; freezing it (SIGSTOP)", first.Value, first.Term)
	frozenAt := time.Now()
	if err := g.Procs[first.Value].Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	second, err := waitLeader(first.Term)
	if err != nil {
		return err
	}
	say("leader: %s, term %d, %v after the freeze (TTL %v)", second.Value, second.Term, time.Since(frozenAt).Round(10*time.Millisecond), ttl)
	say("waking %s up (SIGCONT): it still believes it leads, and writes with term %d", first.Value, first.Term)
	if err := g.Procs[first.Value].Signal(syscall.SIGCONT); err != nil {
		return err
	}
	// Frozen while blocked between two writes, as it is most of the time,
	// it writes once more on waking and is refused. Frozen with a write on
	// its way (the store took it before the new leader's first), or between
	// a write and its look at the leadership, it finds the leadership lost
	// before it writes again.
	for !saw(g.Procs[first.Value], "refused") {
		if saw(g.Procs[first.Value], "leadership lost") {
			say("%s was frozen with a write on its way or just done: it found its leadership lost before writing again", first.Value)
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the woken ex-leader's write was not refused, nor its leadership found lost: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	say("killing the leader %s (SIGKILL)", second.Value)
	if err := g.Procs[second.Value].Cmd.Process.Kill(); err != nil {
		return err
	}
	third, err := waitLeader(second.Term)
	if err != nil {
		return err
	}
	say("leader: %s, term %d", third.Value, third.Term)
	v, _, err := store.Get(ctx, dataKey)
	if err != nil {
		return err
	}
	say("the store holds %q: only ever written with a term at least the highest it had seen", v)
	return nil
}

// saw reports whether the instance printed a line containing s.
func saw(p *procs.Proc, s string) bool {
	_, ok := p.Find(s)
	return ok
}
