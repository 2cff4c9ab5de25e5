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
	// it rather than expect all of them to, and take the holds a quorum
	// has (a master the second acquisition has not reached yet has one).
	holding, holds := 0, int64(0)
	var first layout.Holder
	for _, m := range in.Masters {
		if m.Err != nil {
			fmt.Println("master", m.Index, "failed:", m.Err) // the error names its address
			continue
		}
		st := m.State
		if st.Kind == layout.KindReentrant && st.Holders[0].Token == "worker-7" {
			holding++
			holds = max(holds, st.Holders[0].Count)
			if holding == 1 {
				first = st.Holders[0]
			}
		}
	}
	// Everything in a State came from the master: %q escapes it.
	fmt.Printf("%v lock held by %q, %d holds, TTL set: %v\n", layout.KindReentrant, first.Token, holds, first.TTL > 0)
	fmt.Println("on a quorum:", holding >= client.Quorum())
	// Output:
	// reentrant lock held by "worker-7", 2 holds, TTL set: true
	// on a quorum: true
}
