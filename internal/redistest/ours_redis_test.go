package redistest

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A server started here is recognised as its own; a Server whose port
// another redis-server took first (here: the first server's) is told
// apart by that server's working directory, so StartOne tries another
// port instead of handing a test someone else's server.
func TestStart_anotherServerOnThePortIsNotTakenForOurs(t *testing.T) {
	a := StartOne(t)
	c, err := a.dial(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := a.ours(c); err != nil {
		t.Fatalf("the server StartOne started: %v", err)
	}
	b := &Server{t: t, dir: t.TempDir(), port: a.port}
	err = b.ours(c)
	if err == nil || !strings.Contains(err.Error(), "another server answers there") {
		t.Fatalf("a Server whose port another server answers: %v, want that said", err)
	}
}
