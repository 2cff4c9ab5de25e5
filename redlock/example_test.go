package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// exampleMasters holds the "host:port" of three independent Redis masters
// (started for these examples by TestMain).

func Example() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx := context.Background()
	lock, err := client.Acquire(ctx, "reports:nightly", redlock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	// Do the work while time.Now() is before lock.Until().
	fmt.Println("holding", lock.Key(), "on a quorum of", client.Quorum(), "of", client.Masters(), "masters")
	// Output: holding reports:nightly on a quorum of 2 of 3 masters
}

func ExampleClient_TryAcquire() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	first, err := client.TryAcquire(ctx, "cron:draw")
	if err != nil {
		log.Fatal(err)
	}
	defer first.Release(ctx)

	// A second instance of the job finds the lock taken and skips this run.
	_, err = client.TryAcquire(ctx, "cron:draw")
	var qe *redlock.QuorumError
	if errors.Is(err, redlock.ErrNotAcquired) && errors.As(err, &qe) {
		fmt.Printf("skipped: held elsewhere on %d of %d masters\n", len(qe.Refused), qe.Masters)
	}
	// Output: skipped: held elsewhere on 2 of 3 masters
}

func ExampleLock_Extend() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	lock, err := client.Acquire(ctx, "import:batch-7", redlock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	// The work needs longer than planned: ask for more time.
	switch err := lock.Extend(ctx, 20*time.Second); {
	case err == nil:
		fmt.Println("extended; valid for more than 19s:", time.Until(lock.Until()) > 19*time.Second)
	case errors.Is(err, redlock.ErrLockLost):
		fmt.Println("lost: stop writing now")
	case errors.Is(err, redlock.ErrNotExtended):
		fmt.Println("not extended; still valid until", lock.Until())
	}
	// Output: extended; valid for more than 19s: true
}

func ExampleNodeError() {
	// Masters that fail are reported one by one, by address.
	client, err := redigo.NewFromAddrs([]string{exampleMasters[0], "127.0.0.1:1"},
		redlock.WithTimeout(200*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	_, err = client.TryAcquire(context.Background(), "k")
	var ne *redlock.NodeError
	if errors.As(err, &ne) {
		fmt.Println("master", ne.Index, "at", ne.Addr, "failed")
	}
	// Output: master 1 at 127.0.0.1:1 failed
}

func ExampleClient_Do() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// The lock is extended while the function runs and released when it
	// returns; ctx is cancelled if the lock is lost meanwhile.
	err = client.Do(context.Background(), "invoices:run", func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(10 * time.Millisecond): // the work
			return nil
		}
	}, redlock.WithTTL(5*time.Second))
	fmt.Println("done:", err)
	// Output: done: <nil>
}

func ExampleLock_Lost() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	lock, err := client.Acquire(ctx, "leader", redlock.WithTTL(2*time.Second), redlock.WithAutoExtend(0))
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		// the subject: a spell as the leader
		time.Sleep(20 * time.Millisecond)
		lock.Release(ctx) // stepping down; a lost quorum would close Lost too
	}()
	<-lock.Lost()
	fmt.Println(errors.Is(lock.Err(), redlock.ErrLockLost), errors.Is(lock.Err(), redlock.ErrReleased))
	// Output: true true
}

func ExampleWithFair() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// Every client of the key passes WithFair: waiters are then served in
	// the order they arrived.
	lock, err := client.Acquire(context.Background(), "printer", redlock.WithFair())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first in line:", lock.Key())
	lock.Release(context.Background())
	// Output: first in line: printer
}

func ExampleWithFencing() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	var tokens []uint64
	for i := 0; i < 3; i++ {
		lock, err := client.Acquire(ctx, "ledger:42", redlock.WithFencing())
		if err != nil {
			log.Fatal(err)
		}
		// Send lock.Fence() with every write; the storage refuses a token
		// lower than the highest it has seen (see package fence).
		tokens = append(tokens, lock.Fence())
		_ = lock.Release(ctx)
	}
	fmt.Println("each holder's token is greater than the last:", tokens[0] < tokens[1] && tokens[1] < tokens[2])
	// Output: each holder's token is greater than the last: true
}

func ExampleLockFromContext() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	err = client.Do(context.Background(), "ledger:43", func(ctx context.Context) error {
		lock, _ := redlock.LockFromContext(ctx)
		fmt.Println("writing with a fencing token:", lock.Fence() > 0)
		return nil
	}, redlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	// Output: writing with a fencing token: true
}

func ExampleClient_NewReentrant() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	rl, err := client.NewReentrant("orders:7", "worker-3")
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 3; i++ { // the same owner takes it again at once
		if err := rl.Acquire(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("holds:", rl.Count())
	for rl.Count() > 0 {
		_ = rl.Release(ctx) // the last release deletes the lock
	}
	fmt.Println("holds:", rl.Count())
	// Output:
	// holds: 3
	// holds: 0
}

func ExampleClient_AcquireRead() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	r1, _ := client.AcquireRead(ctx, "catalog")
	r2, _ := client.AcquireRead(ctx, "catalog")     // readers share it
	_, err = client.TryAcquireWrite(ctx, "catalog") // one attempt; its intent is withdrawn
	fmt.Println("writer while two read:", errors.Is(err, redlock.ErrNotAcquired))
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := client.AcquireWrite(ctx, "catalog")
	fmt.Println("writer after they left:", err == nil)
	_ = w.Release(ctx)
	// Output:
	// writer while two read: true
	// writer after they left: true
}

func ExampleClient_AcquireMulti() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	// Both keys or neither, on every master; a common hash tag keeps them
	// in one Redis Cluster slot.
	l, err := client.AcquireMulti(ctx, []string{"{order:7}:items", "{order:7}:payment"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	fmt.Println(l.Keys())
	// Output: [{order:7}:items {order:7}:payment]
}

func ExampleClient_TryAcquireMulti() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	payment, err := client.TryAcquire(ctx, "{order:8}:payment")
	if err != nil {
		log.Fatal(err)
	}
	// One attempt: one key is held, so neither is taken.
	_, err = client.TryAcquireMulti(ctx, []string{"{order:8}:items", "{order:8}:payment"})
	fmt.Println("while payment is held:", errors.Is(err, redlock.ErrNotAcquired))
	_ = payment.Release(ctx)
	l, err := client.TryAcquireMulti(ctx, []string{"{order:8}:items", "{order:8}:payment"})
	fmt.Println("once it is free:", err == nil)
	_ = l.Release(ctx)
	// Output:
	// while payment is held: true
	// once it is free: true
}

func ExampleReentrant_TryAcquire() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	a, _ := client.NewReentrant("orders:8", "worker-a")
	b, _ := client.NewReentrant("orders:8", "worker-b")
	_ = a.TryAcquire(ctx)
	_ = a.TryAcquire(ctx) // the owner again: at once
	err = b.TryAcquire(ctx)
	fmt.Println("worker-a holds", a.Count(), "times; worker-b refused:", errors.Is(err, redlock.ErrNotAcquired))
	_ = a.Release(ctx)
	_ = a.Release(ctx)
	// Output: worker-a holds 2 times; worker-b refused: true
}
