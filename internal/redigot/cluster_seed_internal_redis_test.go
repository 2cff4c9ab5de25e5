package redigot

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/transport"
)

// oneNodeCluster starts a Redis Cluster of one node that owns every slot,
// and returns it once the cluster is up.
func oneNodeCluster(t *testing.T) *redistest.Server {
	t.Helper()
	node := redistest.StartOne(t, redistest.WithConfig("cluster-enabled", "yes"))
	if _, err := node.Do("CLUSTER", "ADDSLOTSRANGE", 0, 16383); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "the cluster's state to be ok", func() bool {
		info, err := redis.String(node.Do("CLUSTER", "INFO"))
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	return node
}

// A command sent to the first seed while the slot map was not read yet,
// whose dial there fails once a refresh has meanwhile told the slot's
// owner, goes to that owner: one seed's failed dial is not the member
// down. (A client of one cluster member met this on its first round when
// the slot map's first read, passing over the same dead seed, won the
// race with the command's own dial.)
func TestCluster_seedsFailedDialAfterTheSlotMapIsReadGoesToTheOwner(t *testing.T) {
	node := oneNodeCluster(t)
	var ct *clusterTransport
	known := make(chan struct{})
	// The first seed: a node that hangs up on every connection, the
	// command's own (its SCRIPT LOADs) only once the slot map is read.
	dead := hostile.Serve(t, func(c net.Conn, quit <-chan struct{}) {
		cmd, err := hostile.ReadCommand(bufio.NewReader(c))
		if err != nil || cmd[0] == "CLUSTER" {
			return
		}
		select {
		case <-known:
		case <-quit:
		}
	})
	var err error
	ct, err = newClusterTransport("cluster://"+dead+"+"+node.Addr(), nil, time.Second, stall.New(clock.Real()))
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	go func() {
		defer close(known)
		redistest.Within(10*time.Second, func() bool { return ct.slots.Load() != nil })
	}()
	done := make(chan error, 1)
	cmd := &transport.Command{Name: "SET", Args: []any{"seed:owner", "v", "PX", "60000"}, Reply: transport.ReplySet,
		Deadline: time.Now().Add(5 * time.Second), DropWhenDown: true}
	cmd.Done = func(_ any, err error, _ transport.SendInfo) { done <- err }
	ct.Send(cmd)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a SET to a member whose second seed owns every slot: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the SET never completed")
	}
	if v, err := redis.String(node.Do("GET", "seed:owner")); err != nil || v != "v" {
		t.Errorf("the owner holds %q (%v), want the SET's value", v, err)
	}
}
