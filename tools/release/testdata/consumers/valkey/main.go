// A program that plugs valkey-go clients in, as the README shows.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/quorumlock/quorumlock/redlock"
	qlvalkey "github.com/quorumlock/quorumlock/valkey"
)

func main() {
	clients := make([]valkey.Client, 0, len(os.Args)-1)
	for _, a := range os.Args[1:] {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{a}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	locks, err := qlvalkey.New(clients, redlock.WithTimeout(50*time.Millisecond))
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
