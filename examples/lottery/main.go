// Command lottery is the seeds' lottery, on quorumlock: several instances
// of one service sell tickets for points and, once per round, draw a
// winner. Two things must never happen: a user's points spent twice (two
// instances read the same balance and both deduct from it), and a round
// drawn twice (every instance's timer fires at noon).
//
//	go run ./examples/lottery                 # on throwaway local masters
//	go run ./examples/lottery -nolock         # the same without locks: watch it break
//
// Each instance has its own client, as separate processes would. A
// user's balance is read, checked and written back under the lock
// user:<id> (with a deliberate pause between the read and the write, as
// real code has); the draw of round r runs under the lock draw:<r> and
// first checks that nobody drew it already, so an instance that gets the
// lock after the winner released it does not draw again.
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
	"strconv"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/examples/internal/throwaway"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

type config struct {
	instances int
	users     int
	points    int
	price     int
	rounds    int
	round     time.Duration
	nolock    bool
}

func main() {
	log.SetFlags(0)
	var cfg config
	flag.IntVar(&cfg.instances, "instances", 4, "instances of the service")
	flag.IntVar(&cfg.users, "users", 50, "users")
	flag.IntVar(&cfg.points, "points", 1000, "each user's starting points")
	flag.IntVar(&cfg.price, "price", 10, "points per ticket")
	flag.IntVar(&cfg.rounds, "rounds", 5, "rounds")
	flag.DurationVar(&cfg.round, "round", 300*time.Millisecond, "how long a round sells tickets")
	flag.BoolVar(&cfg.nolock, "nolock", false, "run without locks")
	flag.Parse()

	consistent, err := runThrowaway(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if !consistent {
		os.Exit(1)
	}
}

// runThrowaway runs the lottery on throwaway masters (or LOTTERY_REDIS's),
// stopped before it returns, and reports whether the books balanced.
func runThrowaway(cfg config) (bool, error) {
	masters, data, stop := throwaway.Masters("LOTTERY_REDIS")
	defer stop()
	res, err := run(context.Background(), cfg, masters, data, os.Stdout)
	if err != nil {
		return false, err
	}
	return res.consistent(), nil
}

// result is what a run did.
type result struct {
	tickets     int
	draws       map[int]int // round -> how many times it was drawn
	pointsLeft  int
	pointsStart int
	negative    int // users with a negative balance
	price       int
}

// consistent reports whether no point was spent twice and every round was
// drawn exactly once.
func (r *result) consistent() bool {
	if r.pointsLeft+r.tickets*r.price != r.pointsStart || r.negative > 0 {
		return false
	}
	for _, n := range r.draws {
		if n != 1 {
			return false
		}
	}
	return true
}

func run(ctx context.Context, cfg config, masters []string, dataAddr string, out io.Writer) (*result, error) {
	data, err := pool.New(dataAddr)
	if err != nil {
		return nil, err
	}
	defer data.Close()
	do := func(cmd string, args ...any) (any, error) {
		c, err := data.GetContext(ctx)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return c.Do(cmd, args...)
	}
	if _, err := do("FLUSHDB"); err != nil {
		return nil, err
	}
	for u := 0; u < cfg.users; u++ {
		if _, err := do("HSET", "points", u, cfg.points); err != nil {
			return nil, err
		}
	}

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.instances)
	for i := 0; i < cfg.instances; i++ {
		c, err := redigo.NewFromAddrs(masters, redlock.WithTimeout(200*time.Millisecond))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := instance(ctx, cfg, i, c, do, start); err != nil {
				errs <- fmt.Errorf("instance %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}

	res := &result{draws: map[int]int{}, pointsStart: cfg.users * cfg.points, price: cfg.price}
	balances, err := redis.IntMap(do("HGETALL", "points"))
	if err != nil {
		return nil, err
	}
	for _, b := range balances {
		res.pointsLeft += b
		if b < 0 {
			res.negative++
		}
	}
	for r := 0; r < cfg.rounds; r++ {
		n, _ := redis.Int(do("LLEN", "tickets:"+strconv.Itoa(r)))
		res.tickets += n
		d, _ := redis.Int(do("GET", "drawn-times:"+strconv.Itoa(r)))
		res.draws[r] = d
	}
	mode := "with locks"
	if cfg.nolock {
		mode = "without locks"
	}
	fmt.Fprintf(out, "%d instances, %d users, %d rounds, %s:\n", cfg.instances, cfg.users, cfg.rounds, mode)
	fmt.Fprintf(out, "  tickets sold: %d (%d points); points left: %d of %d; negative balances: %d\n",
		res.tickets, res.tickets*cfg.price, res.pointsLeft, res.pointsStart, res.negative)
	if spent := res.pointsStart - res.pointsLeft - res.tickets*cfg.price; spent != 0 {
		fmt.Fprintf(out, "  DOUBLE SPENT: the points do not add up (off by %d)\n", -spent)
	}
	for r := 0; r < cfg.rounds; r++ {
		winner, _ := redis.String(do("HGET", "draws", r))
		fmt.Fprintf(out, "  round %d: drawn %d time(s), %s\n", r, res.draws[r], winner)
	}
	verdict := "consistent: no point spent twice, every round drawn once"
	if !res.consistent() {
		verdict = "NOT consistent"
	}
	fmt.Fprintf(out, "  %s\n", verdict)
	return res, nil
}

// instance sells tickets until each round's end, then draws the round.
func instance(ctx context.Context, cfg config, id int, c *redlock.Client, do func(string, ...any) (any, error), start time.Time) error {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	for r := 0; r < cfg.rounds; r++ {
		end := start.Add(time.Duration(r+1) * cfg.round)
		for time.Now().Before(end) {
			if err := buy(ctx, cfg, c, do, rng.IntN(cfg.users), r); err != nil {
				return err
			}
		}
		if err := draw(ctx, cfg, c, do, id, r, rng); err != nil {
			return err
		}
	}
	return nil
}

// locked runs f under the lock on key, or without a lock with -nolock.
// When the lock is not to be had in time, f does not run and locked
// returns nil.
func locked(ctx context.Context, cfg config, c *redlock.Client, key string, f func() error) error {
	if cfg.nolock {
		return f()
	}
	l, err := c.Acquire(ctx, key, redlock.WithTTL(2*time.Second), redlock.WithWait(time.Second))
	if errors.Is(err, redlock.ErrNotAcquired) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = l.Release(context.WithoutCancel(ctx)) }() // else it expires at its TTL
	return f()
}

// buy sells user one ticket for round r if the user has the points.
func buy(ctx context.Context, cfg config, c *redlock.Client, do func(string, ...any) (any, error), user, r int) error {
	return locked(ctx, cfg, c, "lottery:user:"+strconv.Itoa(user), func() error {
		points, err := redis.Int(do("HGET", "points", user))
		if err != nil {
			return err
		}
		if points < cfg.price {
			return nil
		}
		time.Sleep(time.Millisecond) // the work between the read and the write
		if _, err := do("HSET", "points", user, points-cfg.price); err != nil {
			return err
		}
		_, err = do("RPUSH", "tickets:"+strconv.Itoa(r), user)
		return err
	})
}

// draw draws round r unless it was drawn already.
func draw(ctx context.Context, cfg config, c *redlock.Client, do func(string, ...any) (any, error), id, r int, rng *rand.Rand) error {
	return locked(ctx, cfg, c, "lottery:draw:"+strconv.Itoa(r), func() error {
		drawn, err := redis.Bool(do("HEXISTS", "draws", r))
		if err != nil || drawn {
			return err
		}
		n, err := redis.Int(do("LLEN", "tickets:"+strconv.Itoa(r)))
		if err != nil {
			return err
		}
		winner := "no tickets"
		if n > 0 {
			u, err := redis.String(do("LINDEX", "tickets:"+strconv.Itoa(r), rng.IntN(n)))
			if err != nil {
				return err
			}
			winner = fmt.Sprintf("user %s wins (drawn by instance %d from %d tickets)", u, id, n)
		}
		time.Sleep(time.Millisecond)
		if _, err := do("HSET", "draws", r, winner); err != nil {
			return err
		}
		_, err = do("INCR", "drawn-times:"+strconv.Itoa(r))
		return err
	})
}
