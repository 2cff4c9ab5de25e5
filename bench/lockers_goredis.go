package main

import (
	"time"

	goredis "github.com/redis/go-redis/v9"

	qlgoredis "github.com/quorumlock/quorumlock/goredis"
	"github.com/quorumlock/quorumlock/redlock"
)

// quorumlock through its go-redis v9 adapter: one go-redis client per
// master (PoolSize 128, like the peers' go-redis clients), closed after
// the lock client (e.closers run after locker.close).
func init() {
	newQuorumlockGoRedis = func(e *env, n int) locker {
		clients := make([]goredis.UniversalClient, n)
		for i := range clients {
			rc := goredis.NewClient(&goredis.Options{Addr: e.addrs[i], PoolSize: 128})
			e.closers = append(e.closers, func() { rc.Close() })
			clients[i] = rc
		}
		c, err := qlgoredis.New(clients)
		if err != nil {
			panic(err)
		}
		return &qlLocker{c: c, opts: []redlock.LockOption{redlock.WithTTL(ttl), redlock.WithWait(time.Hour)}}
	}
}
