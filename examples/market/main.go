// Command market is the seeds' game-market simulation, on quorumlock.
// Sellers list items on a market; buyers buy them, paying the seller.
// Three ways keep the market consistent under concurrency:
//
//   - watch:  optimistic WATCH/MULTI/EXEC on the market and the buyer,
//     retried whenever anything watched changed;
//   - coarse: one lock on the whole market around every listing and
//     purchase;
//   - fine:   a lock on the one item being listed or bought.
//
// Each runs with the seeds' three load mixes (1 seller/1 buyer, 5/1, 5/5)
// and prints items listed and bought, retries per purchase and purchase
// latency, in the spirit of the seeds' tables 6-1 to 6-3. The data lives
// in one Redis; the locks on three throwaway masters (or REDLOCK_MASTERS,
// with MARKET_REDIS for the data).
//
//	go run ./examples/market [-duration 3s]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/examples/internal/throwaway"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

const (
	startFunds = 1_000_000
	price      = 10
)

func main() {
	log.SetFlags(0)
	duration := flag.Duration("duration", 3*time.Second, "how long each cell runs")
	flag.Parse()
	ok, err := tableThrowaway(*duration)
	if err != nil {
		log.Fatal(err)
	}
	if !ok {
		os.Exit(1)
	}
}

// tableThrowaway prints the table on throwaway masters (or MARKET_REDIS's),
// stopped before it returns.
func tableThrowaway(duration time.Duration) (bool, error) {
	masters, data, stop := throwaway.Masters("MARKET_REDIS")
	defer stop()
	return table(context.Background(), os.Stdout, masters, data, duration)
}

var strategies = []string{"watch", "coarse", "fine"}

var mixes = [][2]int{{1, 1}, {5, 1}, {5, 5}}

// table runs every strategy with every mix and prints the results; it
// reports whether every run left the market consistent.
func table(ctx context.Context, out io.Writer, masters []string, data string, d time.Duration) (bool, error) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tsellers\tbuyers\tlisted\tbought\tretries/buy\tbuy p50\tbuy p99\tconsistent\t")
	allOK := true
	for _, s := range strategies {
		for _, m := range mixes {
			r, err := simulate(ctx, s, m[0], m[1], masters, data, d)
			if err != nil {
				return false, err
			}
			allOK = allOK && r.consistent
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.1f\t%v\t%v\t%v\t\n", s, m[0], m[1], r.listed, r.bought,
				r.retriesPerBuy(), r.pct(0.5).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond), r.consistent)
		}
	}
	return allOK, tw.Flush()
}

type result struct {
	listed, bought, retries int
	latency                 []time.Duration
	consistent              bool
}

func (r *result) retriesPerBuy() float64 {
	if r.bought == 0 {
		return 0
	}
	return float64(r.retries) / float64(r.bought)
}

func (r *result) pct(p float64) time.Duration {
	if len(r.latency) == 0 {
		return 0
	}
	s := slices.Clone(r.latency)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// market is the data: "market" is a zset of item -> price (the item's
// name says its seller), "users:<id>" a hash with "funds", and
// "inventory:<id>" a set of items.
type market struct {
	data     *pool.RedisPool
	strategy string
	locks    *redlock.Client
}

func simulate(ctx context.Context, strategy string, sellers, buyers int, masters []string, data string, d time.Duration) (*result, error) {
	p, err := pool.New(data, pool.WithMaxIdle(32))
	if err != nil {
		return nil, err
	}
	defer p.Close()
	c, err := redigo.NewFromAddrs(masters, redlock.WithTimeout(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	m := &market{data: p, strategy: strategy, locks: c}
	if _, err := m.do(ctx, "FLUSHDB"); err != nil {
		return nil, err
	}
	for u := 0; u < sellers+buyers; u++ {
		if _, err := m.do(ctx, "HSET", user(u), "funds", startFunds); err != nil {
			return nil, err
		}
	}
	// The run ends at d; an operation under way then still completes.
	opCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	res := &result{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, sellers+buyers)
	for s := 0; s < sellers; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				item := fmt.Sprintf("item%d.%s", n, user(s))
				if err := m.list(opCtx, item); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				res.listed++
				mu.Unlock()
			}
		}()
	}
	for b := sellers; b < sellers+buyers; b++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(b), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				start := time.Now()
				bought, retries, err := m.buy(opCtx, b, rng)
				if err != nil {
					errs <- err
					return
				}
				if !bought {
					time.Sleep(time.Millisecond) // nothing listed yet
					continue
				}
				mu.Lock()
				res.bought++
				res.retries += retries
				res.latency = append(res.latency, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	res.consistent, err = m.check(opCtx, sellers+buyers, res)
	return res, err
}

func user(i int) string { return "users:" + strconv.Itoa(i) }

func (m *market) do(ctx context.Context, cmd string, args ...any) (any, error) {
	c, err := m.data.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return redis.DoContext(c, ctx, cmd, args...)
}

// locked runs f holding the lock the strategy asks for.
func (m *market) locked(ctx context.Context, item string, f func() error) error {
	key := "lock:market"
	if m.strategy == "fine" {
		key = "lock:" + item
	}
	l, err := m.locks.Acquire(ctx, key, redlock.WithTTL(5*time.Second), redlock.WithWait(10*time.Second))
	if err != nil {
		return err
	}
	defer func() { _ = l.Release(context.WithoutCancel(ctx)) }() // else it expires at its TTL
	return f()
}

// list puts a new item on the market (its name ends in its seller's).
func (m *market) list(ctx context.Context, item string) error {
	if m.strategy == "watch" {
		_, err := m.do(ctx, "ZADD", "market", price, item) // a listing conflicts with nothing
		return err
	}
	return m.locked(ctx, item, func() error {
		_, err := m.do(ctx, "ZADD", "market", price, item)
		return err
	})
}

// buy buys a listed item for buyer b. It reports whether it bought one,
// and how many times it had to retry.
func (m *market) buy(ctx context.Context, b int, rng *rand.Rand) (bool, int, error) {
	// Pick one of the oldest listings, a little at random, so buyers
	// compete for items as in the seeds' simulation.
	items, err := redis.Strings(m.do(ctx, "ZRANGE", "market", 0, 9))
	if err != nil || len(items) == 0 {
		return false, 0, err
	}
	item := items[rng.IntN(len(items))]
	if m.strategy == "watch" {
		return m.buyWatch(ctx, b, item)
	}
	bought := false
	err = m.locked(ctx, item, func() error {
		var err error
		bought, err = m.transfer(ctx, b, item)
		return err
	})
	return bought, 0, err
}

// transfer moves item to buyer b and its price to the seller, if it is
// still listed and b can pay. The caller holds the lock.
func (m *market) transfer(ctx context.Context, b int, item string) (bool, error) {
	if _, err := redis.Int(m.do(ctx, "ZSCORE", "market", item)); errors.Is(err, redis.ErrNil) {
		return false, nil // sold meanwhile
	} else if err != nil {
		return false, err
	}
	funds, err := redis.Int(m.do(ctx, "HGET", user(b), "funds"))
	if err != nil || funds < price {
		return false, err
	}
	seller := item[strings.IndexByte(item, '.')+1:]
	c, err := m.data.GetContext(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	c.Send("MULTI")
	c.Send("HINCRBY", seller, "funds", price)
	c.Send("HINCRBY", user(b), "funds", -price)
	c.Send("SADD", "inventory:"+strconv.Itoa(b), item)
	c.Send("ZREM", "market", item)
	_, err = c.Do("EXEC")
	return err == nil, err
}

// buyWatch is the seeds' optimistic purchase: WATCH the market and the
// buyer, check, and MULTI/EXEC; start over when EXEC finds a change.
func (m *market) buyWatch(ctx context.Context, b int, item string) (bool, int, error) {
	c, err := m.data.GetContext(ctx)
	if err != nil {
		return false, 0, err
	}
	defer c.Close()
	for retries := 0; ; retries++ {
		if _, err := c.Do("WATCH", "market", user(b)); err != nil {
			return false, retries, err
		}
		if _, err := redis.Int(c.Do("ZSCORE", "market", item)); err != nil {
			_, _ = c.Do("UNWATCH")
			if errors.Is(err, redis.ErrNil) {
				return false, retries, nil // sold meanwhile
			}
			return false, retries, err
		}
		funds, err := redis.Int(c.Do("HGET", user(b), "funds"))
		if err != nil || funds < price {
			_, _ = c.Do("UNWATCH")
			return false, retries, err
		}
		seller := item[strings.IndexByte(item, '.')+1:]
		c.Send("MULTI")
		c.Send("HINCRBY", seller, "funds", price)
		c.Send("HINCRBY", user(b), "funds", -price)
		c.Send("SADD", "inventory:"+strconv.Itoa(b), item)
		c.Send("ZREM", "market", item)
		reply, err := c.Do("EXEC")
		if err != nil {
			return false, retries, err
		}
		if reply != nil {
			return true, retries, nil
		}
		// Something watched changed (any listing or sale touches the
		// market): try again.
	}
}

// check verifies that money was conserved and every bought item is in
// exactly one inventory and off the market.
func (m *market) check(ctx context.Context, users int, r *result) (bool, error) {
	total, owned := 0, 0
	for u := 0; u < users; u++ {
		f, err := redis.Int(m.do(ctx, "HGET", user(u), "funds"))
		if err != nil {
			return false, err
		}
		if f < 0 {
			return false, nil
		}
		total += f
		n, err := redis.Int(m.do(ctx, "SCARD", "inventory:"+strconv.Itoa(u)))
		if err != nil {
			return false, err
		}
		owned += n
	}
	listed, err := redis.Int(m.do(ctx, "ZCARD", "market"))
	if err != nil {
		return false, err
	}
	return total == users*startFunds && owned == r.bought && listed+owned == r.listed, nil
}
