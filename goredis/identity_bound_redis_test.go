package goredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// patientClient is a go-redis client of addr whose own read timeout is
// past two of the lock's per-master timeouts: the lock's deadline is what
// ends a command to a hung master.
func patientClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// Through the adapter: a client's first call, with a master SIGSTOPped,
// returns within one per-master timeout and 100 ms, the run_id probe
// running beside its round. Another master refuses (the key is held
// there), so the round waits the whole timeout for the hung master.
func TestIdentity_firstCallReturnsWithinOneTimeout_pausedMaster(t *testing.T) {
	ss := []*server{startServer(t), startServer(t), startServer(t)}
	const key = "bound-k"
	if err := patientClient(t, ss[1].addr).Set(context.Background(), key, "another-holder", 10*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	ss[2].stop()
	resumed := false
	defer func() {
		if !resumed {
			ss[2].cont()
		}
	}()
	const timeout = 2 * time.Second
	// A loaded machine's lateness; a probe before the round would add a
	// whole timeout.
	const slack = 900 * time.Millisecond
	clients := []redis.UniversalClient{patientClient(t, ss[0].addr), patientClient(t, ss[1].addr), patientClient(t, ss[2].addr)}
	c, err := New(clients, redlock.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.TryAcquire(context.Background(), key, redlock.WithTTL(time.Minute))
	took := time.Since(start)
	// Resumed before Close, which would otherwise wait for go-redis's own
	// read timeout on the hung master's connection.
	ss[2].cont()
	resumed = true
	c.Close()
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Errorf("%v, want an error matching ErrNotAcquired", err)
	}
	t.Logf("first call took %v (timeout %v)", took, timeout)
	if took > timeout+100*time.Millisecond+slack {
		t.Errorf("the first call took %v, want at most the timeout and 100 ms (%v, with %v of slack)",
			took, timeout+100*time.Millisecond, slack)
	}
}

// infoSilent is a master's transport whose INFO commands are never
// answered (they fail at their deadline): its run_id probe times out
// while its lock commands are answered.
type infoSilent struct {
	transport.Transport
	wg sync.WaitGroup
}

func (s *infoSilent) Send(cmd *transport.Command) {
	if cmd.Name != "INFO" {
		s.Transport.Send(cmd)
		return
	}
	s.wg.Add(1)
	time.AfterFunc(time.Until(cmd.Deadline), func() {
		defer s.wg.Done()
		cmd.Complete(nil, fmt.Errorf("INFO not answered: %w", context.DeadlineExceeded), transport.SendInfo{})
	})
}

func (s *infoSilent) Close() error {
	err := s.Transport.Close()
	s.wg.Wait()
	return err
}

// Through the adapter: one server under two addresses, the second's
// run_id probe timing out, and a third master refusing. A Reentrant's
// owner is granted on both addresses of the one server; the grant of the
// unidentified one counts for nothing, and the attempt fails.
func TestIdentity_aliasWhoseProbeTimesOutNeverCountsTwice(t *testing.T) {
	ss := []*server{startServer(t), startServer(t)}
	port := strings.TrimPrefix(ss[0].addr, "127.0.0.1:")
	const key = "alias-re"
	other, err := New([]redis.UniversalClient{patientClient(t, ss[1].addr)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	oh, err := other.NewReentrant(key, "another-owner", redlock.WithTTL(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := oh.TryAcquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts := []transport.Transport{
		NewTransport(patientClient(t, ss[0].addr)),
		NewTransport(patientClient(t, ss[1].addr)),
		&infoSilent{Transport: NewTransport(patientClient(t, "localhost:"+port))},
	}
	c, err := redlock.NewWithTransports(ts, redlock.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	re, err := c.NewReentrant(key, "owner", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	err = re.TryAcquire(context.Background())
	if err == nil {
		_ = re.Release(context.Background())
		t.Fatal("acquired on the grants of one server under two addresses and a refusal")
	}
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("%v, want an error matching ErrNotAcquired", err)
	}
	t.Log(err)
	// What the attempt granted was rolled back, on both addresses.
	admin := patientClient(t, ss[0].addr)
	waitFor(t, "the rollback on the aliased server", func() bool {
		n, err := admin.Exists(context.Background(), key).Result()
		return err == nil && n == 0
	})
}
