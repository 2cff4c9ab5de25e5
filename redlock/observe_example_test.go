package redlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/quorumlock/observe"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// outcomes is an Observer that prints each acquisition's outcome (embed
// NopObserver for the events it does not use).
type outcomes struct{ observe.NopObserver }

func (outcomes) OnAcquire(_ context.Context, e observe.AcquireEvent) {
	fmt.Printf("acquire %s: %s after %d attempt(s)\n", e.Key, e.Outcome, e.Attempts)
}

func ExampleWithObserver() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond),
		redlock.WithObserver(outcomes{}))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	lock, err := client.TryAcquire(ctx, "observed:job")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	_, _ = client.TryAcquire(ctx, "observed:job") // held: refused
	// Output:
	// acquire observed:job: acquired after 1 attempt(s)
	// acquire observed:job: contended after 1 attempt(s)
}

func ExampleLock_Granted() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	lock, err := client.Acquire(ctx, "story:job")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	// Its story: how long it waited (Waited), how many attempts it took,
	// and which masters granted it (at least a quorum).
	fmt.Println("attempts:", lock.Attempts())
	fmt.Println("granted by a quorum:", len(lock.Granted()) >= client.Quorum())
	// Output:
	// attempts: 1
	// granted by a quorum: true
}
