module github.com/quorumlock/quorumlock/bench

go 1.26.0

replace github.com/quorumlock/quorumlock => ../

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/gomodule/redigo v1.9.3
	github.com/quorumlock/quorumlock v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/redis/rueidis/rueidiscompat v1.0.79
	github.com/valkey-io/valkey-go v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/quorumlock/quorumlock/goredis v0.1.0
	github.com/quorumlock/quorumlock/rueidis v0.1.0
	github.com/quorumlock/quorumlock/valkey v0.1.0
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/quorumlock/quorumlock/goredis => ../goredis

replace github.com/quorumlock/quorumlock/rueidis => ../rueidis

replace github.com/quorumlock/quorumlock/valkey => ../valkey
