package cluster_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/integration/cluster"
)

// doctor --key on members that are Redis Clusters checks the ACL on the
// primary that owns the key's slot in each member, FAILing the member whose
// owner refuses the lock scripts, and counts the key's lock copies across
// the members.
func TestRedlockCLI_doctorKeyChecksTheKeysNodeInEachCluster(t *testing.T) {
	rcs := cluster.StartRedisClusters(t, 3, 2, cluster.WithBackend(cluster.Process))
	members := clusterMembers(rcs)
	bin := redlockCLI(t)
	const key = "cli-acl"
	owners := make([]string, len(rcs))
	for i, rc := range rcs {
		o, err := rc.Owner(cluster.Slot(key))
		if err != nil {
			t.Fatal(err)
		}
		owners[i] = o.Addr()
		if _, err := o.Do("SET", key, "tok-acl", "PX", 60000); err != nil {
			t.Fatal(err)
		}
	}
	// Member 0's owner of the key's slot refuses scripts to the user
	// doctor runs as.
	o, err := rcs[0].Owner(cluster.Slot(key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Do("ACL", "SETUSER", "default", "-evalsha", "-eval"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runRedlock(t, bin, members, "doctor", "--json", "--rate-sample", "0", "--key", key)
	var dr struct {
		Masters []struct {
			Addr     string   `json:"address"`
			Verdict  string   `json:"verdict"`
			Problems []string `json:"problems"`
			Cluster  *struct {
				KeyNode string `json:"key_node"`
				Nodes   []struct {
					Addr     string   `json:"address"`
					Verdict  string   `json:"verdict"`
					Problems []string `json:"problems"`
				} `json:"nodes"`
			} `json:"cluster"`
		} `json:"masters"`
		Lock *struct {
			HeldOn int `json:"held_on"`
		} `json:"lock"`
	}
	if err := json.Unmarshal([]byte(out), &dr); err != nil {
		t.Fatalf("doctor --json: %v\n%s%s", err, out, errOut)
	}
	if code != 1 {
		t.Errorf("doctor --key with member 0's key node refusing scripts: exit %d, want 1\n%s", code, out)
	}
	for i, m := range dr.Masters {
		if m.Cluster == nil || m.Cluster.KeyNode != owners[i] {
			t.Fatalf("member %d: %+v, want key_node %s", i, m.Cluster, owners[i])
		}
		for _, n := range m.Cluster.Nodes {
			refused := strings.Contains(strings.Join(n.Problems, "\n"), "the ACL refuses")
			if want := i == 0 && n.Addr == owners[0]; refused != want {
				t.Errorf("member %d, node %s (key node %v): problems %q; want the ACL refusal only on member 0's key node",
					i, n.Addr, n.Addr == owners[i], n.Problems)
			}
		}
		if want := map[bool]string{true: "FAIL", false: "WARN"}[i == 0]; m.Verdict != want && !(i != 0 && m.Verdict == "OK") {
			t.Errorf("member %d: verdict %s, problems %q", i, m.Verdict, m.Problems)
		}
	}
	if dr.Lock == nil || dr.Lock.HeldOn != 3 {
		t.Errorf("lock copies: %+v, want held on 3 members\n%s", dr.Lock, out)
	}
	_, out, _ = runRedlock(t, bin, members, "doctor", "--rate-sample", "0", "--key", key)
	if !strings.Contains(out, "--key: the key's slot is on node "+owners[1]+", where its ACL was checked") ||
		!strings.Contains(out, "lock cli-acl held on 3 of 3 masters") {
		t.Errorf("doctor --key text:\n%s", out)
	}
}
