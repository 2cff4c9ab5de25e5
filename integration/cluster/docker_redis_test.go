package cluster_test

import (
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

func requireDocker(t *testing.T) {
	t.Helper()
	if os.Getenv(cluster.BackendEnv) == string(cluster.Process) {
		t.Skip("QUORUMLOCK_BACKEND=process: this test is about the Docker backend")
	}
	if !cluster.DockerAvailable() {
		t.Skip("no Docker engine answers on this machine")
	}
}

// A container whose redis-server exits at start is reported at once, with
// the container's state and what redis-server printed, not after the
// readiness deadline as a refused connection.
func TestStart_dockerNodeThatExitsIsReportedWithItsStateAndLogs(t *testing.T) {
	requireDocker(t)
	ft := &fatalRecorder{TB: t}
	began := time.Now()
	func() {
		defer func() { _ = recover() }()
		cluster.Start(ft, 1, cluster.WithBackend(cluster.Docker), cluster.WithConfig("no-such-directive", "x"))
	}()
	took := time.Since(began)
	t.Logf("Start failed after %v with: %s", took.Round(time.Millisecond), ft.msg)
	if ft.msg == "" {
		t.Fatal("Start succeeded with a redis-server that cannot start")
	}
	for _, want := range []string{"exited", "exit code 1", "no-such-directive"} {
		if !contains(ft.msg, want) {
			t.Errorf("error %q does not mention %q", ft.msg, want)
		}
	}
	// The readiness deadline is 30 s a container; an exit is seen within
	// a poll of the container's state.
	if took >= 30*time.Second {
		t.Errorf("Start took %v to report a container that exited at once", took)
	}
}

// The host port a container is published on is drawn before Docker binds
// it; when something else takes it meanwhile, Start draws another and
// leaves no container behind for the failed try.
func TestStart_dockerRetriesAPortTakenBeforeItIsBound(t *testing.T) {
	requireDocker(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	var draws atomic.Int32
	t.Cleanup(cluster.SetFreePort(func(tb testing.TB) (int, error) {
		if draws.Add(1) == 1 {
			return taken, nil
		}
		return redistest.FreePort(tb)
	}))
	c := cluster.Start(t, 1, cluster.WithBackend(cluster.Docker))
	m := c.Masters[0]
	if m.Addr() == "127.0.0.1:"+strconv.Itoa(taken) {
		t.Fatalf("master on %s, a port another listener holds", m.Addr())
	}
	if _, err := m.Do("PING"); err != nil {
		t.Fatalf("PING %v: %v", m, err)
	}
	if draws.Load() < 2 {
		t.Fatalf("%d ports drawn: the taken port was not refused", draws.Load())
	}
	p, err := dockertest.NewPool("")
	if err != nil {
		t.Fatal(err)
	}
	left, err := p.Client.ListContainers(dc.ListContainersOptions{All: true, Filters: map[string][]string{
		"label":  {"org.quorumlock.owner-pid=" + strconv.Itoa(os.Getpid())},
		"status": {"created", "exited", "dead"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range left {
		t.Errorf("container %s left behind (%s)", ct.ID[:12], ct.Status)
	}
}

// A container that stops before it answers PING (killed here, as by
// another process's cleanup or the kernel) leaves its published port
// refusing connections: Start sees it is no longer running and makes
// another, rather than ping the dead port until the deadline. A master
// that does not answer by the deadline fails Start with no second
// container, so a second container and a master that answers show the
// replacement; how long Docker takes is not measured (a busy engine can
// take longer to kill, remove and run than the deadline itself).
func TestStart_dockerReplacesAContainerKilledBeforeItAnswers(t *testing.T) {
	requireDocker(t)
	var started atomic.Int32
	t.Cleanup(cluster.SetAfterRun(func(client *dc.Client, id string) {
		if started.Add(1) == 1 {
			if err := client.KillContainer(dc.KillContainerOptions{ID: id, Signal: dc.SIGKILL}); err != nil {
				t.Errorf("kill the first container: %v", err)
			}
		}
	}))
	c := cluster.Start(t, 1, cluster.WithBackend(cluster.Docker))
	if _, err := c.Masters[0].Do("PING"); err != nil {
		t.Fatalf("PING %v: %v", c.Masters[0], err)
	}
	if n := started.Load(); n != 2 {
		t.Errorf("%d containers started, want 2 (the killed one and its replacement)", n)
	}
}
