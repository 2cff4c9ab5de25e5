package redlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func ExampleClient_Inspect() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	r, err := client.NewReentrant("config:reload", "worker-7")
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := r.Acquire(ctx); err != nil {
			log.Fatal(err)
		}
		defer r.Release(ctx)
	}
	in, err := client.Inspect(ctx, "config:reload")
	if err != nil {
		log.Fatal(err)
	}
	// An acquisition returns at a quorum, so count the masters that hold
	// it rather than expect all of them to.
	holding := 0
	for _, m := range in.Masters {
		if m.Err != nil {
			fmt.Println("master", m.Index, "failed:", m.Err) // the error names its address
			continue
		}
		st := m.State
		if st.Kind == layout.KindReentrant && st.Holders[0].Token == "worker-7" {
			holding++
			// Everything in a State came from the master: %q escapes it.
			if holding == 1 {
				h := st.Holders[0]
				fmt.Printf("%v lock held by %q, %d holds, TTL set: %v\n", st.Kind, h.Token, h.Count, h.TTL > 0)
			}
		}
	}
	fmt.Println("on a quorum:", holding >= client.Quorum())
	// Output:
	// reentrant lock held by "worker-7", 2 holds, TTL set: true
	// on a quorum: true
}
