package redigot

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/quorumlock/quorumlock/internal/clienthook"
	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
)

// Options are the redigo transports' settings, kept among a Client's
// options under OptionsKey (clienthook.TransportOption).
type Options struct {
	NoPipelining bool          // every master is on the pooled path
	Pool         []pool.Option // the options of the pools FromAddrs makes
}

type optionsKey struct{}

// OptionsKey is the key of Options in clienthook.Settings.Values.
var OptionsKey any = optionsKey{}

// Pipelining is the update of Options that WithPipelining(on) makes.
func Pipelining(on bool) func(old any) any {
	return func(old any) any {
		o, _ := old.(Options)
		o.NoPipelining = !on
		return o
	}
}

// PoolOptions is the update of Options that WithPoolOptions(opts...)
// makes: opts are added to those given before.
func PoolOptions(opts ...pool.Option) func(old any) any {
	return func(old any) any {
		o, _ := old.(Options)
		o.Pool = append(slices.Clone(o.Pool), opts...)
		return o
	}
}

func optionsOf(s clienthook.Settings) Options {
	o, _ := s.Values[OptionsKey].(Options)
	return o
}

// FromPools makes the transports of the masters behind pools, one pool
// per master (redigo.New). A nil pool, or a pool without an address given
// twice, is refused with fault.ErrInvalid.
func FromPools(pools []pool.Pool, s clienthook.Settings) (clienthook.Made, error) {
	o := optionsOf(s)
	ts := make([]transport.Transport, len(pools))
	seen := make(map[any]int, len(pools))
	for i, p := range pools {
		if p == nil || (reflect.ValueOf(p).Kind() == reflect.Pointer && reflect.ValueOf(p).IsNil()) {
			return clienthook.Made{}, fmt.Errorf("%w: pool %d is nil", fault.ErrInvalid, i)
		}
		addr := "master-" + strconv.Itoa(i)
		if a, ok := p.(pool.Addresser); ok {
			addr = a.Addr()
		} else if reflect.TypeOf(p).Comparable() {
			// The same pool twice, without an address to tell it by.
			if j, dup := seen[p]; dup {
				return clienthook.Made{}, fmt.Errorf("%w: masters %d and %d are the same master (%s): a master given twice would fake a quorum",
					fault.ErrInvalid, j, i, addr)
			}
			seen[p] = i
		}
		ts[i] = New(addr, p, !o.NoPipelining, s.Timeout, s.Stalls)
	}
	return clienthook.Made{Transports: ts}, nil
}

// FromAddrs makes the transports of the masters at addrs, each
// "host:port", a URL as pool.NewFromURL takes it, or a Redis Cluster
// member, cluster://HOST:PORT[+HOST:PORT...] (redigo.NewFromAddrs): one
// pool per master and per node of a cluster member, which Made.Close
// closes.
func FromAddrs(addrs []string, s clienthook.Settings) (clienthook.Made, error) {
	o := optionsOf(s)
	var owned []*pool.RedisPool
	var made clienthook.Made
	made.Close = func() {
		for _, p := range owned {
			p.Close()
		}
	}
	fail := func(err error) (clienthook.Made, error) {
		for _, t := range made.Transports {
			t.Close()
		}
		made.Close()
		return clienthook.Made{}, err
	}
	for i, a := range addrs {
		if pool.IsClusterURL(a) {
			ct, err := NewCluster(a, o.Pool, s.Timeout, s.Stalls)
			if err != nil {
				return fail(fmt.Errorf("%w: master %d: %w", fault.ErrInvalid, i, err))
			}
			made.Transports = append(made.Transports, ct)
			made.ClusterSlots = true
			continue
		}
		var p *pool.RedisPool
		var err error
		if strings.Contains(a, "://") {
			p, err = pool.NewFromURL(a, o.Pool...)
		} else {
			p, err = pool.New(a, o.Pool...)
		}
		if err != nil {
			return fail(fmt.Errorf("%w: master %d: %w", fault.ErrInvalid, i, err))
		}
		owned = append(owned, p)
		made.Transports = append(made.Transports, New(p.Addr(), p, !o.NoPipelining, s.Timeout, s.Stalls))
	}
	return made, nil
}
