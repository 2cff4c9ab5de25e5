// A program that uses the core module as the README's quick start does.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addrs []string) error {
	client, err := redigo.NewFromAddrs(addrs)
	if err != nil {
		return err
	}
	defer client.Close()
	lock, err := client.TryAcquire(ctx, "reports:nightly", redlock.WithTTL(30*time.Second), redlock.WithFencing())
	if errors.Is(err, redlock.ErrNotAcquired) {
		return nil
	}
	if err != nil {
		return err
	}
	defer lock.Release(ctx)
	var _ *fence.Store
	var _ = election.New
	var _ pool.Pool
	fmt.Println("held until", lock.Until(), "fence", lock.Fence())
	return nil
}
