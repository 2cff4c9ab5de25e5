package goredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// Master identity through the adapter: the run_id probe is a command sent through
// the Transport (the hook sees INFO on the lane's client), the first call
// waits for it only as long as its ctx allows while a master is
// SIGSTOPped, the probe goes on for a patient caller, and Close is not
// held up by it.
func TestIdentity_probeThroughLane_pausedMaster(t *testing.T) {
	ms := startMasters(t, 3)
	const timeout = 3 * time.Second
	c, err := New(ms.clients, redlock.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	ms.servers[2].stop()
	defer ms.servers[2].cont()
	patient := make(chan error, 1)
	go func() {
		l, err := c.TryAcquire(context.Background(), "ident-k")
		if err == nil {
			err = l.Release(context.Background())
		}
		patient <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.TryAcquire(ctx, "ident-k2")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an impatient first call: %v, want an error matching context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > timeout-time.Second {
		t.Errorf("the impatient call took %v: it waited for the probe, not for its ctx", took)
	}
	if err := <-patient; err != nil {
		t.Fatalf("the patient call: %v", err)
	}
	for i := 0; i < 2; i++ {
		if n := ms.hooks[i].get("info"); n != 1 {
			t.Errorf("master %d's client saw %d INFO, want 1 (the probe, through the lane)", i, n)
		}
	}
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(3*timeout + 2*time.Second):
		t.Fatal("Close hangs")
	}
}
