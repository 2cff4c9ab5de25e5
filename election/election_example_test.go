package election_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func ExampleElection() {
	client, err := redigo.NewFromAddrs(exampleMasters, redlock.WithTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	e, err := election.New(client, "example:scheduler", election.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "10.0.0.7:8080") // blocks until elected
	if err != nil {
		log.Fatal(err)
	}
	// Anyone can ask who leads, and for which term.
	who, err := e.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", who.Value, "same term:", who.Term == ld.Term())

	// Lead until ld.Lost() fires, writing with ld.Term() as a fencing
	// token; then hand over at once.
	if err := ld.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = e.Leader(ctx)
	fmt.Println(err)
	// Output:
	// leader: 10.0.0.7:8080 same term: true
	// election: no leader of "example:scheduler"
}
