package redigot

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
)

// inspectPool runs cmds on a connection of p in one round trip, bounded
// by ctx's deadline: the Inspector ability of both redigo transports.
func inspectPool(ctx context.Context, p pool.Pool, cmds []layout.Command) ([]any, error) {
	conn, err := p.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return roundTrip(ctx, conn, cmds)
}

// roundTrip sends cmds on conn in one write and reads their replies, all
// within ctx's deadline (Client.inspect bounds it by the per-master
// timeout). An error reply is returned in its place among the replies; any other failure ends the round trip and
// leaves conn broken (a read past its deadline breaks a redigo
// connection), so that its pool discards it rather than hand its next
// user the replies still due.
func roundTrip(ctx context.Context, conn redis.Conn, cmds []layout.Command) ([]any, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Second) // Inspect always sets one
	}
	for _, cmd := range cmds {
		if err := conn.Send(cmd.Name, cmd.Args...); err != nil {
			return nil, err
		}
	}
	if err := conn.Flush(); err != nil {
		return nil, err
	}
	left := time.Until(deadline)
	if left <= 0 {
		// Past the deadline: replies already buffered are still taken,
		// else the read fails at once and breaks conn.
		left = -time.Nanosecond
	}
	// One read of every reply, by redigo's Do(""), which counts them as
	// read before it reads: when its parser panics on a hostile master (a
	// pool this package did not make), the pool's Close of conn has no
	// replies left to wait for. Received one by one, the replies after the
	// panic stayed due, and Close waited for them without a deadline — for
	// ever, on a master that sent no more.
	v, err := redis.DoWithTimeout(conn, left, "")
	if err != nil {
		return nil, err
	}
	replies, ok := v.([]any)
	if !ok || len(replies) != len(cmds) {
		return nil, fmt.Errorf("inspection: %d commands, replies %T", len(cmds), v)
	}
	return replies, nil // an error reply in its place, as a redis.Error
}
