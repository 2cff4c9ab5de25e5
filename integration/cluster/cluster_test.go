package cluster_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/integration/cluster"
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
	for i := 0; i < 200; i++ {
		if _, err = m.Do("PING"); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}
