package goredis_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/goredis"
	"github.com/quorumlock/quorumlock/redlock"
)

// A redlock.Client over go-redis clients the service already has. With
// one master, as here, a lock is as safe as that master; give three or
// five independent masters (one client each) for Redlock's quorum.
func ExampleNew() {
	addr := os.Getenv("REDIS_ADDR") // e.g. "127.0.0.1:6379"
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close() // the caller's, closed after the lock client

	locks, err := goredis.New([]redis.UniversalClient{rdb}, redlock.WithTimeout(200*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	lock, err := locks.Acquire(ctx, "jobs:nightly", redlock.WithTTL(10*time.Second), redlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", lock.Key(), "fence", lock.Fence())
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}

	// Do holds the lock while fn runs, extending it, and releases it.
	err = locks.Do(ctx, "jobs:nightly", func(ctx context.Context) error {
		fmt.Println("running the nightly job")
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// holding jobs:nightly fence 1
	// running the nightly job
	// done: <nil>
}
