package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// The redlock command's status and doctor on quorum members that are Redis
// Clusters, given as cluster://SEED+SEED. The command is built once and
// run as a process: cmd/redlock is in the library's module, which cannot
// import this harness.

// redlockCLI builds the redlock command into the test's directory (the
// build cache makes every build after the first a link).
func redlockCLI(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "redlock")
	out, err := exec.Command("go", "build", "-o", path, "github.com/quorumlock/quorumlock/cmd/redlock").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/redlock: %v: %s", err, out)
	}
	return path
}

// runRedlock runs the command on members and returns its exit code,
// stdout and stderr.
func runRedlock(t *testing.T, bin string, members []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--masters", strings.Join(members, ","), "--timeout", "500ms"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errOut.String()
	}
	t.Fatalf("redlock %v: %v", args, err)
	return 0, "", ""
}

// clusterMembers is the --masters item of each member: cluster://SEED+SEED.
func clusterMembers(rcs []*cluster.RedisCluster) []string {
	var out []string
	for _, rc := range rcs {
		out = append(out, "cluster://"+strings.Join(rc.Seeds(), "+"))
	}
	return out
}

// statusJSON is the part of status --json the tests read.
type statusJSON struct {
	Keys []struct {
		Key     string `json:"key"`
		Verdict string `json:"verdict"`
		Holder  string `json:"holder"`
		HeldOn  int    `json:"held_on"`
		Masters []struct {
			Addr     string `json:"address"`
			Node     string `json:"cluster_node"`
			Slot     *int   `json:"slot"`
			Answered bool   `json:"answered"`
			Error    string `json:"error"`
			Kind     string `json:"kind"`
		} `json:"masters"`
	} `json:"keys"`
	Failed int `json:"failed"`
}

// doctorJSON is the part of doctor --json the tests read.
type doctorJSON struct {
	Masters []struct {
		Addr     string   `json:"address"`
		Verdict  string   `json:"verdict"`
		Problems []string `json:"problems"`
		Warnings []string `json:"warnings"`
		Cluster  *struct {
			State        string `json:"cluster_state"`
			SlotsCovered int    `json:"slots_covered"`
			Nodes        []struct {
				Addr      string `json:"address"`
				Reachable bool   `json:"reachable"`
				Role      string `json:"role"`
				Verdict   string `json:"verdict"`
			} `json:"nodes"`
		} `json:"cluster"`
	} `json:"masters"`
}

func TestRedlockCLI_statusAndDoctorOnClusterMembers(t *testing.T) {
	cluster.ForEachBackend(t, testCLIStatusAndDoctor)
}

func testCLIStatusAndDoctor(t *testing.T, b cluster.Backend) {
	rcs := cluster.StartRedisClusters(t, 3, 2, cluster.WithBackend(b))
	members := clusterMembers(rcs)
	bin := redlockCLI(t)
	const key = "cli-job"
	slot := cluster.Slot(key)
	owners := make([]string, len(rcs))
	for i, rc := range rcs {
		o, err := rc.Owner(slot)
		if err != nil {
			t.Fatal(err)
		}
		owners[i] = o.Addr()
		// A plain lock as the engine writes it: the token, with a TTL.
		if _, err := o.Do("SET", key, "tok-cli", "PX", 60000); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errOut := runRedlock(t, bin, members, "status", "--json", key, "other-key")
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	k := st.Keys[0]
	if k.Verdict != "held" || k.Holder != "tok-cli" || k.HeldOn != 3 {
		t.Errorf("status of %s: %s by %q on %d, want held by tok-cli on 3:\n%s", key, k.Verdict, k.Holder, k.HeldOn, out)
	}
	for i, m := range k.Masters {
		if m.Addr != members[i] || m.Node != owners[i] || m.Slot == nil || *m.Slot != slot || m.Kind != "lock" {
			t.Errorf("member %d: %+v, want address %s, node %s, slot %d, kind lock", i, m, members[i], owners[i], slot)
		}
	}
	if st.Keys[1].Verdict != "free" {
		t.Errorf("other-key: %s, want free", st.Keys[1].Verdict)
	}
	code, out, errOut = runRedlock(t, bin, members, "status", key)
	if code != 0 || !strings.Contains(out, members[0]+" slot "+strconv.Itoa(slot)+" on "+owners[0]) ||
		!strings.Contains(out, "held by tok-cli on 3 of 3 masters") {
		t.Errorf("status: exit %d, want the owning node named per member:\n%s%s", code, out, errOut)
	}

	// doctor: WARN (no AOF on the harness's nodes) is exit 0.
	code, out, errOut = runRedlock(t, bin, members, "doctor", "--json")
	if code != 0 {
		t.Fatalf("doctor: exit %d\n%s%s", code, out, errOut)
	}
	var dr doctorJSON
	if err := json.Unmarshal([]byte(out), &dr); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	for i, m := range dr.Masters {
		c := m.Cluster
		// Every node announces 127.0.0.1 (docker: cluster-announce-hostname
		// with its published port), so none is refused as off loopback.
		if m.Addr != members[i] || m.Verdict == "FAIL" || c == nil || c.State != "ok" || c.SlotsCovered != cluster.Slots || len(c.Nodes) != 2 {
			t.Fatalf("doctor, member %d: %+v (cluster %+v), want cluster_state ok, every slot covered, 2 primaries", i, m, c)
		}
		for _, n := range c.Nodes {
			if !n.Reachable || n.Role != "master" || !strings.HasPrefix(n.Addr, "127.0.0.1:") {
				t.Errorf("doctor, member %d: node %+v", i, n)
			}
		}
	}
	code, out, _ = runRedlock(t, bin, members, "doctor")
	if code != 0 || !strings.Contains(out, "Redis Cluster: cluster_state ok, 16384 of 16384 slots covered, 2 primaries") ||
		strings.Count(out, "\n  node 127.0.0.1:") != 6 {
		t.Errorf("doctor: exit %d:\n%s", code, out)
	}

	// exec locks on cluster members (the library's cluster transport):
	// tok-cli holds the key on every member, so it is refused.
	code, _, errOut = runRedlock(t, bin, members, "exec", key, "--", "true")
	if code != 75 || !strings.Contains(errOut, "held by another token") {
		t.Errorf("exec on cluster members while tok-cli holds the key: exit %d: %s", code, errOut)
	}
}

// A node of one member that is down: status still reads the key on a
// quorum (the other members) and names the node; doctor FAILs that member
// and says which primary.
func TestRedlockCLI_clusterNodeDown(t *testing.T) {
	rcs := cluster.StartRedisClusters(t, 3, 2, cluster.WithBackend(cluster.Process))
	bin := redlockCLI(t)
	members := clusterMembers(rcs)
	const key = "cli-down"
	slot := cluster.Slot(key)
	var dead *cluster.Node
	for i, rc := range rcs {
		o, err := rc.Owner(slot)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Do("SET", key, "tok-down", "PX", 60000); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			dead = o
		}
	}
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runRedlock(t, bin, members, "status", "--json", key)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if k := st.Keys[0]; k.Verdict != "held" || k.HeldOn != 2 || k.Masters[1].Answered || !strings.Contains(k.Masters[1].Error, dead.Addr()) {
		t.Errorf("status with member 1's owner down: %+v", k)
	}
	code, out, _ = runRedlock(t, bin, members, "doctor", "--json")
	var dr doctorJSON
	if err := json.Unmarshal([]byte(out), &dr); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if code != 1 || dr.Masters[1].Verdict != "FAIL" || !strings.Contains(strings.Join(dr.Masters[1].Problems, "\n"), "primary "+dead.Addr()+" FAILs") ||
		dr.Masters[0].Verdict == "FAIL" || dr.Masters[2].Verdict == "FAIL" {
		t.Errorf("doctor with member 1's node %s down: exit %d\n%s", dead.Addr(), code, out)
	}
}

// A seed whose slot map is stale sends status to a node that no longer
// (in its own view: never) owns the key's slot: that node answers MOVED,
// and status follows it once, to the owner.
func TestRedlockCLI_statusFollowsMOVED(t *testing.T) {
	bin := redlockCLI(t)
	rc := cluster.StartRedisClusters(t, 1, 3, cluster.WithBackend(cluster.Process))[0]
	// A key of node 0's slots (config epoch 1); node 2 is told node 1
	// (epoch 2) owns it. Node 0's claim, with a lower epoch, does not undo
	// that in node 2's map; node 1 keeps node 0 as the owner.
	key := ""
	for i := 0; ; i++ {
		key = "moved-" + strconv.Itoa(i)
		if o, err := rc.Owner(cluster.Slot(key)); err != nil {
			t.Fatal(err)
		} else if o == rc.Nodes[0] {
			break
		}
	}
	slot := cluster.Slot(key)
	if _, err := rc.Nodes[0].Do("SET", key, "tok-moved", "PX", 60000); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Nodes[2].Do("CLUSTER", "SETSLOT", slot, "NODE", rc.Nodes[1].ID()); err != nil {
		t.Fatal(err)
	}
	if v, err := redis.String(rc.Nodes[1].Do("GET", key)); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Fatalf("node 1 answers GET with %q, %v: want MOVED", v, err)
	}
	stale := "cluster://" + rc.Nodes[2].Addr()
	code, out, errOut := runRedlock(t, bin, []string{stale}, "status", "--json", key)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if k := st.Keys[0]; k.Verdict != "held" || k.Holder != "tok-moved" || k.Masters[0].Node != rc.Nodes[0].Addr() {
		t.Errorf("status through a stale seed: %+v, want held by tok-moved, read on %s", k, rc.Nodes[0].Addr())
	}
}

// A member given by seeds on 127.0.0.1 whose cluster announces a primary
// elsewhere (cluster-announce-ip set to another address, as a container's
// address would be): doctor says so and FAILs the member, status says so
// for the keys of that primary's slots, and neither dials that address.
func TestRedlockCLI_primaryAnnouncedOffLoopback(t *testing.T) {
	rc := cluster.StartRedisClusters(t, 1, 2, cluster.WithBackend(cluster.Process))[0]
	bin := redlockCLI(t)
	const elsewhere = "10.255.255.1" // never dialed
	if _, err := rc.Nodes[1].Do("CONFIG", "SET", "cluster-announce-ip", elsewhere); err != nil {
		t.Fatal(err)
	}
	// The seed learns the new address by gossip.
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := rc.Nodes[0].Do("CLUSTER", "SLOTS")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(fmtReply(v), elsewhere) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 0 does not announce node 1 at %s: %s", elsewhere, fmtReply(v))
		}
		time.Sleep(50 * time.Millisecond)
	}
	member := []string{"cluster://" + rc.Nodes[0].Addr()}
	code, out, errOut := runRedlock(t, bin, member, "doctor", "--json")
	var dr doctorJSON
	if err := json.Unmarshal([]byte(out), &dr); err != nil {
		t.Fatalf("doctor --json: %v\n%s%s", err, out, errOut)
	}
	m := dr.Masters[0]
	if code != 1 || m.Verdict != "FAIL" || m.Cluster == nil || len(m.Cluster.Nodes) != 2 {
		t.Fatalf("doctor: exit %d\n%s", code, out)
	}
	off := m.Cluster.Nodes[1]
	if !strings.HasPrefix(off.Addr, elsewhere+":") || off.Reachable || off.Verdict != "FAIL" ||
		!strings.Contains(strings.Join(m.Problems, "\n"), "primary "+off.Addr+" FAILs") {
		t.Errorf("doctor: the primary announced at %s: %+v\n%s", elsewhere, off, out)
	}
	if !strings.Contains(out, "announced off loopback while the seeds are on loopback: not dialed") {
		t.Errorf("doctor does not say the primary is announced off loopback:\n%s", out)
	}
	key := ""
	for i := 0; ; i++ {
		key = "off-" + strconv.Itoa(i)
		if o, err := rc.Owner(cluster.Slot(key)); err != nil {
			t.Fatal(err)
		} else if o == rc.Nodes[1] {
			break
		}
	}
	code, out, errOut = runRedlock(t, bin, member, "status", key)
	if code != 69 || !strings.Contains(out, "announced off loopback") {
		t.Errorf("status of a key on the primary announced at %s: exit %d, want 69 and why:\n%s%s", elsewhere, code, out, errOut)
	}
}

// fmtReply prints a reply for a test's message.
func fmtReply(v any) string {
	switch v := v.(type) {
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = fmtReply(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case []byte:
		return string(v)
	default:
		return fmt.Sprint(v)
	}
}

// Slots without a primary: doctor FAILs the member and names the gap.
func TestRedlockCLI_doctorUncoveredSlots(t *testing.T) {
	rc := cluster.StartRedisClusters(t, 1, 2, cluster.WithBackend(cluster.Process))[0]
	bin := redlockCLI(t)
	for _, n := range rc.Nodes {
		if _, err := n.Do("CLUSTER", "DELSLOTSRANGE", 100, 199); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runRedlock(t, bin, []string{"cluster://" + strings.Join(rc.Seeds(), "+")}, "doctor", "--json")
	var dr doctorJSON
	if err := json.Unmarshal([]byte(out), &dr); err != nil {
		t.Fatalf("doctor --json: %v\n%s%s", err, out, errOut)
	}
	m := dr.Masters[0]
	if code != 1 || m.Verdict != "FAIL" || m.Cluster == nil || m.Cluster.SlotsCovered != cluster.Slots-100 ||
		!strings.Contains(strings.Join(m.Problems, "\n"), "100 of 16384 slots have no primary (100-199)") {
		t.Errorf("doctor with slots 100-199 unassigned: exit %d\n%s", code, out)
	}
}

// A hung node (SIGSTOP) of a cluster member costs status one bounded wait:
// the keys of its slots after the first are skipped, and the keys of the
// other node's slots are still read.
func TestRedlockCLI_statusHungNodeAskedOnce(t *testing.T) {
	rc := cluster.StartRedisClusters(t, 1, 2, cluster.WithBackend(cluster.Process))[0]
	bin := redlockCLI(t)
	var hung, live []string
	for i := 0; len(hung) < 4 || len(live) < 1; i++ {
		k := "hung-" + strconv.Itoa(i)
		o, err := rc.Owner(cluster.Slot(k))
		if err != nil {
			t.Fatal(err)
		}
		if o == rc.Nodes[1] && len(hung) < 4 {
			hung = append(hung, k)
		} else if o == rc.Nodes[0] && len(live) < 1 {
			live = append(live, k)
		}
	}
	if err := rc.Nodes[1].Pause(); err != nil {
		t.Fatal(err)
	}
	defer rc.Nodes[1].Resume()
	start := time.Now()
	code, out, errOut := runRedlock(t, bin, []string{"cluster://" + rc.Nodes[0].Addr()}, append([]string{"status", "--json"}, append(hung, live...)...)...)
	took := time.Since(start)
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: exit %d: %v\n%s%s", code, err, out, errOut)
	}
	if code != 69 || took > 5*time.Second {
		t.Errorf("status: exit %d after %v, want 69 (keys unknown) within a few seconds", code, took)
	}
	for i, k := range st.Keys[:len(hung)] {
		m := k.Masters[0]
		if k.Verdict != "unknown" || m.Answered || m.Node != rc.Nodes[1].Addr() {
			t.Errorf("key %s on the hung node: %+v", k.Key, k)
		}
		if skipped := strings.Contains(m.Error, "asked once, skipped"); skipped != (i > 0) {
			t.Errorf("key %d (%s) on the hung node: error %q; want it asked once, then skipped", i, k.Key, m.Error)
		}
	}
	if k := st.Keys[len(hung)]; k.Verdict != "free" || k.Masters[0].Node != rc.Nodes[0].Addr() {
		t.Errorf("key %s on the live node: %+v", k.Key, k)
	}
}

// redlock exec on members that are Redis Clusters: the lock is
// taken on the node that owns the key's slot in every member, held while
// the command runs (a second exec is refused, exit 75), released after;
// --fence exports a fencing token.
func TestRedlockCLI_execOnClusterMembers(t *testing.T) {
	rcs := cluster.StartRedisClusters(t, 3, 3, cluster.WithBackend(cluster.Process))
	members := clusterMembers(rcs)
	bin := redlockCLI(t)
	const key = "{cli-exec}:job"
	slot := cluster.Slot(key)
	holders := func() []string {
		t.Helper()
		out := make([]string, len(rcs))
		for i, rc := range rcs {
			o, err := rc.Owner(slot)
			if err != nil {
				t.Fatal(err)
			}
			v, err := redis.String(o.Do("GET", key))
			if err != nil && !errors.Is(err, redis.ErrNil) {
				t.Fatal(err)
			}
			out[i] = v
		}
		return out
	}

	// The first exec holds the lock while its command sleeps.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := exec.CommandContext(ctx, bin, "--masters", strings.Join(members, ","), "--timeout", "500ms",
		"exec", "--ttl", "10s", "--fence", key, "--", "/bin/sh", "-c", `echo "fence=$QUORUMLOCK_FENCE"; sleep 3`)
	first.Env = []string{"PATH=/usr/bin:/bin"}
	var out, errOut bytes.Buffer
	first.Stdout, first.Stderr = &out, &errOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	held := redistest.Within(10*time.Second, func() bool {
		for _, v := range holders() {
			if v == "" {
				return false
			}
		}
		return true
	})
	if !held {
		t.Fatalf("the lock is not on every member's owner while exec runs: %q (stderr %s)", holders(), errOut.String())
	}
	code, _, errs := runRedlock(t, bin, members, "exec", key, "--", "/bin/true")
	if code != 75 {
		t.Errorf("second exec while the first holds the lock: exit %d (stderr %s), want 75", code, errs)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first exec: %v (stderr %s)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "fence=") || strings.Contains(out.String(), "fence=\n") {
		t.Errorf("no fencing token exported: %q", out.String())
	}
	for i, v := range holders() {
		if v != "" {
			t.Errorf("member %d still holds %s after exec: %q", i, key, v)
		}
	}
	code, stdout, errs := runRedlock(t, bin, members, "exec", key, "--", "/bin/echo", "ran")
	if code != 0 || strings.TrimSpace(stdout) != "ran" {
		t.Errorf("exec after release: exit %d, stdout %q, stderr %s", code, stdout, errs)
	}
}
