package main

import (
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsrueidis "github.com/go-redsync/redsync/v4/redis/rueidis"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidiscompat"
	"github.com/valkey-io/valkey-go"

	"github.com/quorumlock/quorumlock/redlock"
	qlrueidis "github.com/quorumlock/quorumlock/rueidis"
	qlvalkey "github.com/quorumlock/quorumlock/valkey"
)

// quorumlock through its rueidis and valkey-go adapters, and go-redsync
// through its rueidis adapter (over rueidiscompat): one client per master
// with the library's defaults, closed after the lock client (e.closers
// run after locker.close). go-redsync's valkey-go adapter needs
// valkeycompat, which the module proxy does not serve: the valkey-go
// adapter is compared with go-redsync on rueidis, the client valkey-go
// forked.

func newQuorumlockRueidis(e *env, n int) locker {
	clients := make([]rueidis.Client, n)
	for i := range clients {
		clients[i] = rueidisClient(e, i)
	}
	c, err := qlrueidis.New(clients)
	if err != nil {
		panic(err)
	}
	return &qlLocker{c: c, opts: []redlock.LockOption{redlock.WithTTL(ttl), redlock.WithWait(time.Hour)}}
}

func newQuorumlockValkey(e *env, n int) locker {
	clients := make([]valkey.Client, n)
	for i := range clients {
		clients[i] = valkeyClient(e, i)
	}
	c, err := qlvalkey.New(clients)
	if err != nil {
		panic(err)
	}
	return &qlLocker{c: c, opts: []redlock.LockOption{redlock.WithTTL(ttl), redlock.WithWait(time.Hour)}}
}

func newRedsyncRueidis(e *env, n int) locker {
	pools := make([]rsredis.Pool, n)
	for i := range pools {
		pools[i] = rsrueidis.NewPool(rueidiscompat.NewAdapter(rueidisClient(e, i)))
	}
	return &rsLocker{rs: redsync.New(pools...)}
}

func rueidisClient(e *env, i int) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.addrs[i]}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	e.closers = append(e.closers, c.Close)
	return c
}

func valkeyClient(e *env, i int) valkey.Client {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{e.addrs[i]}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	e.closers = append(e.closers, c.Close)
	return c
}
