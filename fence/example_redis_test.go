package fence_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

func ExampleStore() {
	// A throwaway redis-server for the example; use your data store.
	addrs, stop, err := redistest.Launch(1)
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	p, err := pool.New(addrs[0])
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	store, err := fence.NewStore(p)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Tokens come from Lock.Fence() of locks taken with redlock.WithFencing().
	_ = store.Set(ctx, "report", 8, []byte("by the holder with token 8"), 0)
	err = store.Set(ctx, "report", 7, []byte("by a paused, stale holder"), 0)
	fmt.Println("stale write refused:", errors.Is(err, fence.ErrStale))
	v, _, _ := store.Get(ctx, "report")
	fmt.Println(string(v))
	// Output:
	// stale write refused: true
	// by the holder with token 8
}

func ExampleGuard() {
	var g fence.Guard
	balance := 100
	write := func(token uint64, amount int) error {
		return g.Write("account:7", token, func() error {
			balance += amount
			return nil
		})
	}
	fmt.Println(write(3, -30), balance)
	fmt.Println(write(2, -30), balance) // a stale holder
	// Output:
	// <nil> 70
	// fence: stale fencing token 2 for "account:7": a holder with token 3 has read or written 70
}
