package redlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func ExampleWithMetadata() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	l, err := client.Acquire(ctx, "example:report", redlock.WithMetadata("host=web-3 pid=4711"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	in, err := client.Inspect(ctx, "example:report")
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range in.Masters {
		if m.Err == nil && len(m.State.Holders) == 1 && m.State.Holders[0].Token == l.Token() {
			fmt.Printf("held by %q\n", m.State.Holders[0].Meta) // from a master: %q escapes it
			break
		}
	}
	// Output:
	// held by "host=web-3 pid=4711"
}
