package cluster_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, m *cluster.Master, key string) string {
	t.Helper()
	v, err := redis.String(m.Do("GET", key))
	if err != nil && !errors.Is(err, redis.ErrNil) {
		t.Fatalf("GET on %v: %v", m, err)
	}
	return v
}

func TestMaster_faultControls(t *testing.T) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		c := cluster.Start(t, 2, cluster.WithBackend(b))
		if c.Backend() != b || len(c.Masters) != 2 || len(c.Pools()) != 2 {
			t.Fatalf("cluster %v with %d masters", c.Backend(), len(c.Masters))
		}
		m := c.Masters[0]
		if _, err := m.Do("SET", "k", "v"); err != nil {
			t.Fatal(err)
		}

		// Pause: the connection opens (the kernel accepts) but no reply comes.
		if err := m.Pause(); err != nil {
			t.Fatal(err)
		}
		conn, err := redis.Dial("tcp", m.Addr(), redis.DialConnectTimeout(time.Second))
		if err == nil {
			_, err = redis.DoWithTimeout(conn, 300*time.Millisecond, "PING")
			conn.Close()
		}
		if err == nil {
			t.Error("a paused master answered PING")
		}
		if err := m.Resume(); err != nil {
			t.Fatal(err)
		}
		if get(t, m, "k") != "v" {
			t.Error("the key was lost across a pause")
		}

		// Kill and start without persistence: the master comes back empty.
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Do("PING"); err == nil {
			t.Error("a killed master answered")
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		if get(t, m, "k") != "" {
			t.Error("a master without persistence kept its key across a crash")
		}

		// Partition: unreachable, still running, keys kept.
		if _, err := m.Do("SET", "k", "v2"); err != nil {
			t.Fatal(err)
		}
		err = m.Partition()
		if b == cluster.Process {
			if !errors.Is(err, cluster.ErrUnsupported) {
				t.Fatalf("process Partition = %v, want ErrUnsupported", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Do("PING"); err == nil {
			t.Error("a partitioned master answered")
		}
		if _, err := c.Masters[1].Do("PING"); err != nil {
			t.Errorf("the other master is unreachable too: %v", err)
		}
		if err := m.Heal(); err != nil {
			t.Fatal(err)
		}
		if err := waitPing(m); err != nil {
			t.Fatalf("after heal: %v", err)
		}
		if get(t, m, "k") != "v2" {
			t.Error("the key was lost across a partition")
		}
	})
}

func TestMaster_restartWithAOFKeepsKeys(t *testing.T) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		c := cluster.Start(t, 1, cluster.WithBackend(b), cluster.WithAOF())
		m := c.Masters[0]
		if _, err := m.Do("SET", "k", "v", "PX", 60000); err != nil {
			t.Fatal(err)
		}
		if err := m.Restart(); err != nil { // SIGKILL, then start
			t.Fatal(err)
		}
		if get(t, m, "k") != "v" {
			t.Error("AOF appendfsync always lost a key across a crash")
		}
		if err := m.Stop(); err != nil { // SIGTERM
			t.Fatal(err)
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		if get(t, m, "k") != "v" {
			t.Error("the key was lost across a clean restart")
		}
		if err := c.HealAll(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestStart_missingImageSaysHowToBuildOne(t *testing.T) {
	if os.Getenv(cluster.BackendEnv) == string(cluster.Process) {
		t.Skip("QUORUMLOCK_BACKEND=process: this test is about the Docker backend")
	}
	if !cluster.DockerAvailable() {
		t.Skip("no Docker engine answers on this machine")
	}
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		// WithoutPull: the test must not make the engine reach for a registry.
		cluster.Start(ft, 1, cluster.WithBackend(cluster.Docker), cluster.WithImage("quorumlock/no-such-image:never"), cluster.WithoutPull())
	}()
	for _, want := range []string{"quorumlock/no-such-image:never", "make redis-image", cluster.ImageEnv} {
		if !contains(ft.msg, want) {
			t.Errorf("error %q does not mention %q", ft.msg, want)
		}
	}
}

func waitPing(m *cluster.Master) error {
	var err error
	if redistest.Within(4*time.Second, func() bool { _, err = m.Do("PING"); return err == nil }) {
		return nil
	}
	return err
}

func TestMaster_clockFaults(t *testing.T) {
	c := cluster.Start(t, 2, cluster.WithBackend(cluster.Process), cluster.WithClockFaults())
	m := c.Masters[0]
	serverTime := func() time.Time {
		t.Helper()
		v, err := redis.Int64s(m.Do("TIME"))
		if err != nil || len(v) != 2 {
			t.Fatalf("TIME: %v %v", v, err)
		}
		return time.Unix(v[0], v[1]*1000)
	}
	if err := m.SetClockRate(2); err != nil {
		t.Fatal(err)
	}
	m0, w0 := time.Now(), serverTime()
	time.Sleep(500 * time.Millisecond) // the subject: a span over which the clock's rate is measured
	m1, w1 := time.Now(), serverTime()
	if r := float64(w1.Sub(w0)) / float64(m1.Sub(m0)); r < 1.9 || r > 2.1 {
		t.Fatalf("measured rate %.3f on %v, want 2", r, m)
	}
	if _, err := m.Do("SET", "k", "v", "PX", 5000); err != nil {
		t.Fatal(err)
	}
	if err := m.JumpClock(6 * time.Second); err != nil {
		t.Fatal(err)
	}
	if get(t, m, "k") != "" {
		t.Fatalf("a 5 s key outlived a 6 s jump on %v", m)
	}
	if !contains(m.String(), "clock rate 2") || m.ClockOffset() < 6*time.Second {
		t.Fatalf("String() = %q, offset %v", m, m.ClockOffset())
	}
	// The clock survives a restart, as a machine's would; the other
	// master's is untouched.
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	if off := serverTime().Sub(time.Now()); off < 6*time.Second {
		t.Fatalf("offset after a restart %v, want > 6s", off)
	}
	if err := m.ResetClock(); err != nil {
		t.Fatal(err)
	}
	if off := serverTime().Sub(time.Now()); off.Abs() > 100*time.Millisecond {
		t.Fatalf("offset after ResetClock %v", off)
	}
	if c.Masters[1].ClockRate() != 1 || c.Masters[1].ClockOffset().Abs() > time.Millisecond {
		t.Fatalf("the other master's clock moved: %v", c.Masters[1])
	}

	plain := cluster.Start(t, 1, cluster.WithBackend(cluster.Process))
	if err := plain.Masters[0].JumpClock(time.Second); !errors.Is(err, cluster.ErrUnsupported) {
		t.Fatalf("JumpClock without WithClockFaults: %v, want ErrUnsupported", err)
	}
}
