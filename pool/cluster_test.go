package pool_test

import (
	"testing"

	"github.com/quorumlock/quorumlock/pool"
)

func TestClusterSpec_Dialable(t *testing.T) {
	local, err := pool.ParseClusterURL("cluster://127.0.0.1:7000+localhost:7001+[::1]:7002")
	if err != nil || !local.Loopback || len(local.Seeds) != 3 {
		t.Fatalf("%+v, %v", local, err)
	}
	remote, err := pool.ParseClusterURL("cluster://10.0.0.1:7000")
	if err != nil || remote.Loopback {
		t.Fatalf("%+v, %v", remote, err)
	}
	for _, tc := range []struct {
		cs   pool.ClusterSpec
		addr string
		ok   bool
	}{
		{local, "127.0.0.1:7005", true},
		{local, "[::1]:7005", true},
		{local, "10.0.0.2:7005", false},
		{remote, "10.0.0.2:7005", true},
		{remote, "127.0.0.1:7005", false},
		{remote, "localhost:6379", false},
	} {
		if err := tc.cs.Dialable(tc.addr); (err == nil) != tc.ok {
			t.Errorf("loopback seeds %v, %s: %v", tc.cs.Loopback, tc.addr, err)
		}
	}
}
