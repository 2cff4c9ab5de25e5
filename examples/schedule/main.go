// Command schedule runs a job once per period across three replicas: each
// replica's timer fires at every slot of the schedule, and the slot's
// work is done exactly once, even when a replica freezes (SIGSTOP) in the
// middle of a slot and a lock master is killed.
//
// The recipe, in runSlot:
//
//   - one lock for the job (not one per slot), taken with WithFencing and
//     WithMinHold: a replica that finishes early leaves the key held until
//     half the period has passed, so a replica whose timer fires late does
//     not find it free and start the slot again;
//
//   - a check under the lock whether the slot's result is in the store
//     already (a lock alone gives "one at a time", not "once"); a replica
//     that finds the lock held looks again before it takes the lock, so
//     a replica frozen with the lock is replaced within the slot, and the
//     others, once the slot is done, do not take it at all;
//
//   - the result written with the lock's fencing token, to a store that
//     refuses a token lower than the highest one that committed (a replica
//     paused past its lock, whose lock another replica took since) and
//     never replaces a committed result.
//
//     go run ./examples/schedule    # on three throwaway masters and a data Redis
//
// With REDLOCK_MASTERS and SCHEDULE_DATA set the replicas use those.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/examples/internal/procs"
	"github.com/quorumlock/quorumlock/internal/masters"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

const (
	// replicaEnv, when set, makes the program one replica, named by it.
	replicaEnv = "SCHEDULE_EXAMPLE_REPLICA"
	// skewEnv delays the replica's timer (a clock or scheduler running late).
	skewEnv = "SCHEDULE_EXAMPLE_SKEW"
	dataEnv = "SCHEDULE_DATA"
	jobKey  = "examples:schedule:report"

	period  = 2 * time.Second
	ttl     = 500 * time.Millisecond // auto-extended while the job runs
	minHold = period / 2             // at least the timers' spread
	jobTime = 300 * time.Millisecond
)

func main() {
	log.SetFlags(0)
	if name := os.Getenv(replicaEnv); name != "" {
		os.Exit(replica(name))
	}
	os.Exit(run())
}

// run runs the scenario on $REDLOCK_MASTERS and $SCHEDULE_DATA, or on
// throwaway servers stopped before it returns.
func run() int {
	exe, err := os.Executable()
	if err != nil {
		log.Print(err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := scenarioEnv{exe: exe, lock: masters.FromEnv(), data: os.Getenv(dataEnv)}
	if len(env.lock) == 0 || env.data == "" {
		fmt.Println("starting 3 throwaway lock masters and a data Redis on 127.0.0.1 ...")
		servers, stop, err := redistest.LaunchServers(4)
		if err != nil {
			log.Printf("%v\n(install Redis with: apt-get install -y redis-server)", err)
			return 1
		}
		defer stop()
		env.lock = []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
		env.data = servers[3].Addr()
		env.kill = servers[0].Kill
	}
	if _, err := scenario(ctx, os.Stdout, env); err != nil {
		log.Print(err)
		return 1
	}
	return 0
}

// replica runs the job at every slot of the schedule until SIGTERM.
func replica(name string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	skew, _ := time.ParseDuration(os.Getenv(skewEnv))
	c, err := redigo.NewFromAddrs(masters.FromEnv())
	if err != nil {
		log.Print(err)
		return 1
	}
	defer c.Close()
	st, err := newStore(os.Getenv(dataEnv))
	if err != nil {
		log.Print(err)
		return 1
	}
	defer st.Close()
	for first := true; ; first = false {
		// The next slot, by this replica's (late) clock.
		slot := time.Now().Add(-skew).UnixMilli()/period.Milliseconds() + 1
		fire := time.UnixMilli(slot * period.Milliseconds()).Add(skew)
		if first {
			// A replica started after its timer fired for a slot
			// leaves that slot to the others.
			fmt.Printf("%s: first slot %d\n", name, slot)
		}
		t := time.NewTimer(time.Until(fire))
		select {
		case <-ctx.Done():
			t.Stop()
			return 0
		case <-t.C:
		}
		runSlot(ctx, c, st, name, slot, fire.Add(period))
	}
}

// runSlot does slot's work if no replica has. Until the slot ends it
// looks whether the slot is done, and if not tries to take the lock for a
// while (a replica frozen while holding it loses it at its TTL); under the
// lock it looks again. A replica that finds the slot done does not take the
// lock, so it does not keep the key for another minimum hold.
func runSlot(ctx context.Context, c *redlock.Client, st *store, name string, slot int64, end time.Time) {
	sctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	for sctx.Err() == nil {
		dctx, cancel := context.WithTimeout(sctx, timeout)
		done, err := st.done(dctx, slot)
		cancel()
		if err == nil && done {
			return
		}
		err = c.Do(sctx, jobKey, func(ctx context.Context) error { return job(ctx, st, name, slot) },
			redlock.WithTTL(ttl), redlock.WithFencing(), redlock.WithMinHold(minHold), redlock.WithWait(ttl))
		switch {
		case err == nil:
			return
		case !errors.Is(err, redlock.ErrNotAcquired):
			fmt.Printf("%s: slot %d: %v\n", name, slot, err)
			return
		}
	}
}

// job is the slot's work, under the lock: it looks whether the slot is
// done, and if not does it and commits the result with the lock's fence.
func job(ctx context.Context, st *store, name string, slot int64) error {
	l, _ := redlock.LockFromContext(ctx)
	dctx, cancel := context.WithTimeout(ctx, timeout)
	done, err := st.done(dctx, slot)
	cancel()
	switch {
	case err != nil:
		return err
	case done:
		fmt.Printf("%s: slot %d: done already\n", name, slot)
		return nil
	}
	fmt.Printf("%s: slot %d: running (fence %d)\n", name, slot, l.Fence())
	time.Sleep(jobTime) // the job's work, which does not look at ctx
	// The write is on its way whether or not the lock was lost meanwhile
	// (a replica paused here finds out only now): the store's check of the
	// fence is what refuses a stale one.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	res, err := st.commit(wctx, slot, name, l.Fence())
	switch {
	case err != nil:
		return err
	case res == stale:
		fmt.Printf("%s: slot %d: write with fence %d refused: a newer holder committed\n", name, slot, l.Fence())
	case res == doneAlready:
		fmt.Printf("%s: slot %d: another replica committed it first\n", name, slot)
	default:
		fmt.Printf("%s: slot %d: committed (fence %d)\n", name, slot, l.Fence())
	}
	return nil
}

// scenarioEnv is where the scenario runs: the program to start as each
// replica, the lock masters, the data Redis, and how to kill a master
// (nil: none is killed).
type scenarioEnv struct {
	exe  string
	lock []string
	data string
	kill func() error
}

// Result is what the scenario saw in the store.
type Result struct {
	// Commits counts the commits of each slot from the first to the last
	// one committed.
	Commits map[int64]int
	// Stale counts the writes the store refused for a stale fence.
	Stale int
	// Frozen is the slot during which the replica FrozenName was frozen.
	Frozen     int64
	FrozenName string
	// Firsts is each replica's first slot.
	Firsts map[string]int64
}

// scenario starts three replicas (the third one's timer 300 ms late),
// freezes the first replica it sees running a slot that every replica
// attends (the first slot of the latest schedule), kills a lock master
// (with env.kill), wakes the frozen replica once another one committed
// its slot, and runs two more slots. It returns what the store holds, and
// an error when a slot was committed twice or not at all, or the woken
// replica's write was not refused.
func scenario(ctx context.Context, out io.Writer, env scenarioEnv) (Result, error) {
	var res Result
	st, err := newStore(env.data)
	if err != nil {
		return res, err
	}
	defer st.Close()
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	names := []string{"a", "b", "c"}
	g, err := procs.Start(env.exe, names, func(name string) []string {
		return []string{replicaEnv + "=" + name, masters.Env + "=" + strings.Join(env.lock, ","),
			dataEnv + "=" + env.data, skewEnv + "=" + strconv.Itoa(150*slices.Index(names, name)) + "ms"}
	}, func(name, line string) { say("  [%s] %s", name, line) })
	if err != nil {
		return res, err
	}
	defer g.Stop()
	poll := func(what string, cond func() bool) error {
		for !cond() {
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil
	}

	// The slot to freeze a replica in is one every replica attends, so
	// that the others are still trying it when the frozen one's lock
	// expires. Their schedules need not start with the same slot: a replica
	// started after its timer fired for a slot starts with the next one,
	// and the timers are skewed (started 200 ms into a slot, the third
	// replica still runs that slot, the other two begin with the next).
	res.Firsts = map[string]int64{}
	err = poll("every replica's first slot", func() bool {
		for name, pr := range g.Procs {
			if l, ok := pr.Find(name + ": first slot "); ok {
				var s int64
				if _, err := fmt.Sscanf(l, name+": first slot %d", &s); err == nil {
					res.Firsts[name] = s
				}
			}
		}
		return len(res.Firsts) == len(names)
	})
	if err != nil {
		return res, err
	}
	for _, s := range res.Firsts {
		res.Frozen = max(res.Frozen, s)
	}
	// A replica may have begun that slot before the last one said its
	// first: it may commit before it is seen running, so take the next.
	for _, pr := range g.Procs {
		if _, ok := pr.Find(fmt.Sprintf(": slot %d: running", res.Frozen)); ok {
			res.Frozen++
			break
		}
	}

	// Freeze the first replica seen running that slot, holding the lock.
	frozen := ""
	err = poll(fmt.Sprintf("a replica running slot %d", res.Frozen), func() bool {
		for name, pr := range g.Procs {
			if _, ok := pr.Find(fmt.Sprintf("%s: slot %d: running", name, res.Frozen)); ok {
				frozen = name
				return pr.Signal(syscall.SIGSTOP) == nil
			}
		}
		return false
	})
	if err != nil {
		return res, err
	}
	res.FrozenName = frozen
	say("froze %s (SIGSTOP) while it runs slot %d", frozen, res.Frozen)
	if env.kill != nil {
		if err := env.kill(); err != nil {
			return res, err
		}
		say("killed lock master %s (SIGKILL)", env.lock[0])
	}
	err = poll("another replica to commit the frozen slot", func() bool {
		d, err := st.done(ctx, res.Frozen)
		return err == nil && d
	})
	if err != nil {
		return res, err
	}
	say("slot %d committed by another replica; waking %s (SIGCONT)", res.Frozen, frozen)
	if err := g.Procs[frozen].Signal(syscall.SIGCONT); err != nil {
		return res, err
	}
	if err := poll("the woken replica's write to be refused", func() bool {
		_, ok := g.Procs[frozen].Find("refused")
		return ok
	}); err != nil {
		return res, err
	}
	if err := poll("two more slots", func() bool {
		d, err := st.done(ctx, res.Frozen+2)
		return err == nil && d
	}); err != nil {
		return res, err
	}
	return verify(ctx, say, st, res)
}

// verify reads the store's commits: every slot from the first to the
// last one committed exactly once.
func verify(ctx context.Context, say func(string, ...any), st *store, res Result) (Result, error) {
	commits, err := st.commits(ctx)
	if err != nil {
		return res, err
	}
	if res.Stale, err = st.staleRefused(ctx); err != nil {
		return res, err
	}
	res.Commits = map[int64]int{}
	var slots []int64
	for _, c := range commits {
		slot, err := strconv.ParseInt(c[0], 10, 64)
		if err != nil {
			return res, err
		}
		if res.Commits[slot] == 0 {
			slots = append(slots, slot)
		}
		res.Commits[slot]++
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
	var bad []string
	for s := slots[0]; s <= slots[len(slots)-1]; s++ {
		if n := res.Commits[s]; n != 1 {
			bad = append(bad, fmt.Sprintf("slot %d committed %d times", s, n))
		}
	}
	say("slots %d to %d: %d commits; %d write(s) refused for a stale fence", slots[0], slots[len(slots)-1], len(commits), res.Stale)
	if res.Stale == 0 {
		bad = append(bad, "no stale write was refused")
	}
	if len(bad) > 0 {
		return res, errors.New(strings.Join(bad, "; "))
	}
	say("every slot committed exactly once")
	return res, nil
}
