// A program that plugs go-redis clients in, as the README shows.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/goredis"
	"github.com/quorumlock/quorumlock/redlock"
)

func main() {
	clients := make([]redis.UniversalClient, 0, len(os.Args)-1)
	for _, a := range os.Args[1:] {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: a}))
	}
	locks, err := goredis.New(clients, redlock.WithTimeout(50*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer locks.Close()
	ctx := context.Background()
	err = locks.Do(ctx, "reports:nightly", func(ctx context.Context) error {
		return nil
	}, redlock.WithWait(0))
	fmt.Println(err)
}
