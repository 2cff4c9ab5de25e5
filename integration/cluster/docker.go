package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/quorumlock/quorumlock/internal/clockfault"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Labels on every container and network the Docker backend makes, so that
// leftovers of a test binary that died can be found and removed.
const (
	labelKind  = "org.quorumlock.test"
	labelOwner = "org.quorumlock.owner-pid"
)

// DockerAvailable reports whether a Docker engine answers a ping within
// two seconds.
func DockerAvailable() bool {
	p, err := dockertest.NewPool("")
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return p.Client.PingWithContext(ctx) == nil
}

// localImageExists reports whether LocalImage is in the Docker engine.
func localImageExists() bool {
	p, err := dockertest.NewPool("")
	if err != nil {
		return false
	}
	_, err = p.Client.InspectImage(LocalImage)
	return err == nil
}

type dockerNode struct {
	pool     *dockertest.Pool
	res      *dockertest.Resource
	network  *dockertest.Network
	hostAddr string // 127.0.0.1:port, pinned so it survives restarts
	inner    int    // the port it listens on inside: 6379, or its published port
}

func startDocker(t testing.TB, n int, cfg *config) ([]node, error) {
	t.Helper()
	if cfg.clocks {
		return nil, fmt.Errorf("cluster: WithClockFaults: %w: clock faults run on the process backend only (the image has no clock shim)", ErrUnsupported)
	}
	p, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("cluster: docker: %w", err)
	}
	p.MaxWait = 30 * time.Second
	if err := p.Client.Ping(); err != nil {
		return nil, fmt.Errorf("cluster: the Docker engine does not answer (use %s=%s for redis-server processes): %w", BackendEnv, Process, err)
	}
	reap(p)
	repo, tag := splitImage(cfg.image)
	if err := ensureImage(p, repo, tag, !cfg.noPull); err != nil {
		return nil, err
	}

	owner := strconv.Itoa(os.Getpid())
	labels := map[string]string{labelKind: "1", labelOwner: owner}
	netName := fmt.Sprintf("quorumlock-%s-%d", owner, time.Now().UnixNano())
	network, err := p.CreateNetwork(netName, func(o *dc.CreateNetworkOptions) { o.Labels = labels })
	if err != nil {
		return nil, fmt.Errorf("cluster: create network: %w", err)
	}
	t.Cleanup(func() { _ = p.RemoveNetwork(network) })

	nodes := make([]node, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd, err := runMaster(t, p, network, repo, tag, labels, cfg)
			if nd != nil {
				t.Cleanup(func() { _ = p.Purge(nd.res) })
				nodes[i] = nd
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return nodes, nil
}

// runMaster starts one container with its port pinned to a free port of
// 127.0.0.1 (pinned, so that it keeps its address across restarts; and a
// cluster node listens inside on that same port, so it must be known
// before the container is made). The port is drawn before Docker binds it,
// so another process can take it meanwhile: Docker then refuses to start
// the container, which is removed, and another port is drawn. A container
// that exits before it answers PING is removed and made again too; when
// every try fails, the error gives each one's container state and logs.
func runMaster(t testing.TB, p *dockertest.Pool, network *dockertest.Network, repo, tag string, labels map[string]string, cfg *config) (*dockerNode, error) {
	base := append([]string{"redis-server", "--bind", "0.0.0.0", "--protected-mode", "no",
		"--port", "6379", "--dir", "/data"}, cfg.redisArgs()...)
	var errs []error
	lastLogs := "\x00" // no try yet
	for attempt := 1; attempt <= startAttempts; attempt++ {
		port, err := freePort(t)
		if err != nil {
			return nil, err
		}
		cmd := base
		inner := 6379
		if cfg.samePort {
			inner = port
			cmd = append(append([]string(nil), cmd...), "--port", strconv.Itoa(inner))
		}
		if cfg.portArgs != nil {
			cmd = append(append([]string(nil), cmd...), cfg.portArgs(port)...)
		}
		innerPort := dc.Port(strconv.Itoa(inner) + "/tcp")
		// Named, so that a container Docker made but could not start
		// (RunWithOptions then returns no Resource) can be removed.
		name := fmt.Sprintf("quorumlock-%s-%d-%d", labels[labelOwner], processStart, containerSeq.Add(1))
		res, err := p.RunWithOptions(&dockertest.RunOptions{
			Name:       name,
			Repository: repo,
			Tag:        tag,
			Cmd:        cmd,
			Labels:     labels,
			// By ID: RunWithOptions writes back into a *Network it is
			// given, which would race between masters started at once.
			NetworkID:    network.Network.ID,
			ExposedPorts: []string{string(innerPort)},
			PortBindings: map[dc.Port][]dc.PortBinding{
				innerPort: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}},
			},
		}, func(hc *dc.HostConfig) {
			hc.PublishAllPorts = false // only the binding above, on 127.0.0.1
			hc.AutoRemove = false
			hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("try %d, port %d: %w", attempt, port, err))
			if res != nil {
				_ = p.Purge(res)
			} else {
				_ = p.Client.RemoveContainer(dc.RemoveContainerOptions{ID: name, Force: true, RemoveVolumes: true})
			}
			continue
		}
		if afterRun != nil {
			afterRun(p.Client, res.Container.ID)
		}
		nd := &dockerNode{pool: p, res: res, network: network, hostAddr: "127.0.0.1:" + strconv.Itoa(port), inner: inner}
		err = nd.waitReady()
		if err == nil {
			return nd, nil
		}
		var gone *containerGone
		if !errors.As(err, &gone) {
			// Up but not answering until the deadline: no second try.
			return nd, err
		}
		_ = p.Purge(res)
		if gone.ownExit && gone.logs == lastLogs {
			// redis-server ended itself the same way twice: it refuses
			// its arguments (the log lines of a start carry a time), and
			// a third try would too.
			return nil, fmt.Errorf("cluster: run %s:%s: the container exited the same way twice: %w", repo, tag, err)
		}
		lastLogs = gone.logs
		errs = append(errs, fmt.Errorf("try %d: %w", attempt, err))
	}
	return nil, fmt.Errorf("cluster: run %s:%s: no container answered PING in %d tries: %w", repo, tag, startAttempts, errors.Join(errs...))
}

// startAttempts bounds the containers runMaster makes for one master.
const startAttempts = 5

// processStart and containerSeq make the names of this process's
// containers unique.
var (
	processStart = time.Now().UnixNano()
	containerSeq atomic.Int64
)

// ensureImage pulls the image when it is missing and says how to build
// one when that fails too.
func ensureImage(p *dockertest.Pool, repo, tag string, pull bool) error {
	ref := repo + ":" + tag
	if _, err := p.Client.InspectImage(ref); err == nil {
		return nil
	}
	pullErr := errors.New("pulling is turned off")
	if pull {
		if pullErr = p.Client.PullImage(dc.PullImageOptions{Repository: repo, Tag: tag}, dc.AuthConfiguration{}); pullErr == nil {
			return nil
		}
	}
	return fmt.Errorf("cluster: image %s is not present and could not be pulled (%v). "+
		"Without a registry, build one from Debian's redis-server with `make redis-image` "+
		"(integration/image/build.sh) and set %s=%s; or run redis-server processes with %s=%s",
		ref, pullErr, ImageEnv, LocalImage, BackendEnv, Process)
}

func splitImage(ref string) (repo, tag string) {
	slash := strings.LastIndex(ref, "/")
	if colon := strings.LastIndex(ref, ":"); colon > slash {
		return ref[:colon], ref[colon+1:]
	}
	return ref, "latest"
}

// reap removes containers and networks left by test binaries that died.
func reap(p *dockertest.Pool) {
	filter := map[string][]string{"label": {labelKind + "=1"}}
	if cs, err := p.Client.ListContainers(dc.ListContainersOptions{All: true, Filters: filter}); err == nil {
		for _, c := range cs {
			if ownerDead(c.Labels[labelOwner]) {
				_ = p.Client.RemoveContainer(dc.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true})
			}
		}
	}
	if ns, err := p.Client.FilteredListNetworks(dc.NetworkFilterOpts{"label": {labelKind + "=1": true}}); err == nil {
		for _, n := range ns {
			if ownerDead(n.Labels[labelOwner]) {
				_ = p.Client.RemoveNetwork(n.ID)
			}
		}
	}
}

func ownerDead(pid string) bool {
	if _, err := strconv.Atoi(pid); err != nil {
		return true
	}
	_, err := os.Stat("/proc/" + pid)
	return err != nil
}

func (d *dockerNode) addr() string { return d.hostAddr }

// clock: the image is FROM scratch with Debian's redis-server only; clock
// faults run on the process backend.
func (d *dockerNode) clock() *clockfault.Clock { return nil }

// pause freezes the container's cgroup. On a busy host the runtime can
// fail to freeze every thread in time (HTTP 500, "OCI runtime pause
// failed"), leaving the container running: the fault was not applied, so
// it is tried again a few times before the error is reported.
func (d *dockerNode) pause() error {
	var err error
	for try := 0; try < 5; try++ {
		if err = d.pool.Client.PauseContainer(d.res.Container.ID); err == nil {
			return nil
		}
		time.Sleep(time.Duration(50*(try+1)) * time.Millisecond) // backoff between tries
	}
	return err
}

func (d *dockerNode) resume() error { return d.pool.Client.UnpauseContainer(d.res.Container.ID) }

func (d *dockerNode) kill() error { return d.signalAndWait(dc.SIGKILL) }

// stop sends SIGTERM: dockertest sets the container's StopSignal to
// SIGWINCH, so StopContainer would end in a SIGKILL.
func (d *dockerNode) stop() error { return d.signalAndWait(dc.SIGTERM) }

func (d *dockerNode) signalAndWait(sig dc.Signal) error {
	id := d.res.Container.ID
	if err := d.pool.Client.KillContainer(dc.KillContainerOptions{ID: id, Signal: sig}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := d.pool.Client.WaitContainerWithContext(id, ctx); err != nil {
		return fmt.Errorf("waiting for the container to exit: %w", err)
	}
	return nil
}

func (d *dockerNode) start() error {
	if err := d.pool.Client.StartContainer(d.res.Container.ID, nil); err != nil {
		return err
	}
	return d.waitReady()
}

// partition takes the container off the cluster's network: its published
// port stops answering, and the master keeps running with its keys.
func (d *dockerNode) partition() error {
	return d.pool.Client.DisconnectNetwork(d.network.Network.ID,
		dc.NetworkConnectionOptions{Container: d.res.Container.ID, Force: true})
}

func (d *dockerNode) heal() error {
	return d.pool.Client.ConnectNetwork(d.network.Network.ID,
		dc.NetworkConnectionOptions{Container: d.res.Container.ID})
}

// waitReady pings the master through its published port until it answers
// (a scratch image has no shell for a health check), for at most the
// pool's MaxWait. It looks at the container between pings: once it is no
// longer running (redis-server exited, or the container was killed or
// removed) its published port can only refuse, so it returns at once, a
// *containerGone. Either error gives the container's state and the end
// of its logs.
func (d *dockerNode) waitReady() error {
	var err error
	var gone *containerGone
	var nextLook time.Time
	if redistest.Within(d.pool.MaxWait, func() bool {
		if err = ping(d.hostAddr); err == nil {
			return true
		}
		if now := time.Now(); now.After(nextLook) {
			nextLook = now.Add(200 * time.Millisecond)
			if state, running, code := d.state(); !running {
				logs := d.logs()
				gone = &containerGone{logs, code > 0 && code < 128, fmt.Errorf("cluster: master %s: the container is not running (%s) [last PING: %w]%s",
					d.hostAddr, state, err, logs)}
				return true
			}
		}
		return false
	}) && gone == nil {
		return nil
	}
	if gone != nil {
		return gone
	}
	state, _, _ := d.state()
	return fmt.Errorf("cluster: master %s did not answer PING within %v: %w (container %s)%s",
		d.hostAddr, d.pool.MaxWait, err, state, d.logs())
}

// containerGone is waitReady's error when the container stopped running.
type containerGone struct {
	logs    string // as logs gives them
	ownExit bool   // redis-server exited (not by a signal, not removed)
	err     error
}

func (e *containerGone) Error() string { return e.err.Error() }
func (e *containerGone) Unwrap() error { return e.err }

// state describes the container as Docker sees it, says whether it is
// running, and gives its exit code (-1 when it is gone).
func (d *dockerNode) state() (desc string, running bool, exitCode int) {
	c, err := d.pool.Client.InspectContainer(d.res.Container.ID)
	if err != nil {
		var gone *dc.NoSuchContainer
		if errors.As(err, &gone) {
			return fmt.Sprintf("%s removed", short(d.res.Container.ID)), false, -1
		}
		return fmt.Sprintf("%s not inspected: %v", short(d.res.Container.ID), err), true, 0
	}
	st := c.State
	desc = fmt.Sprintf("%s %s", short(c.ID), st.Status)
	if !st.Running {
		desc += fmt.Sprintf(", exit code %d", st.ExitCode)
		if st.OOMKilled {
			desc += ", OOM-killed"
		}
		if st.Error != "" {
			desc += ", error " + strconv.Quote(st.Error)
		}
		if !st.FinishedAt.IsZero() && !st.StartedAt.IsZero() {
			desc += fmt.Sprintf(", ran %v", st.FinishedAt.Sub(st.StartedAt).Round(time.Millisecond))
		}
	}
	if c.NetworkSettings != nil {
		desc += fmt.Sprintf(", ports %v", c.NetworkSettings.Ports)
	}
	return desc, st.Running && !st.Restarting, st.ExitCode
}

// logs returns the last lines the container printed, on lines of their
// own, for an error message.
func (d *dockerNode) logs() string {
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := d.pool.Client.Logs(dc.LogsOptions{Context: ctx, Container: d.res.Container.ID,
		OutputStream: &buf, ErrorStream: &buf, Stdout: true, Stderr: true, Tail: "20"})
	out := strings.TrimRight(buf.String(), "\n")
	switch {
	case err != nil:
		return fmt.Sprintf("\n\tcontainer logs: %v", err)
	case out == "":
		return "\n\tcontainer logs: (empty)"
	}
	return "\n\tcontainer logs (last 20 lines):\n\t\t" + strings.ReplaceAll(out, "\n", "\n\t\t")
}

func short(id string) string { return id[:min(12, len(id))] }

func ping(addr string) error {
	c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(time.Second),
		redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Do("PING")
	return err
}

// ipIn returns the container's address on the cluster's network, as the
// other containers reach it (it may change when the container restarts).
func (d *dockerNode) ipIn() (string, error) {
	c, err := d.pool.Client.InspectContainer(d.res.Container.ID)
	if err != nil {
		return "", err
	}
	for _, n := range c.NetworkSettings.Networks {
		if n.NetworkID == d.network.Network.ID && n.IPAddress != "" {
			return n.IPAddress, nil
		}
	}
	return "", fmt.Errorf("container %s has no address on network %s", d.res.Container.Name, d.network.Network.Name)
}

// freePort draws the host port a container is published on (a variable
// so that a test can hand out a taken one).
var freePort = redistest.FreePort

// afterRun, when set, is called with every container runMaster started,
// before it waits for it (a test kills one there).
var afterRun func(client *dc.Client, id string)
