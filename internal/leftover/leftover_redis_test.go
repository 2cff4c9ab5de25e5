package leftover_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder keeps what a check reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// A fencing counter stays; the lock key, its metadata and a fair queue
// are reported, by master address, once the bound has passed, and not
// once they are gone within it.
func TestNone_reportsWhatALockLeftButItsFence(t *testing.T) {
	redistest.SkipShort(t)
	ss := redistest.Start(t, 2)
	for _, k := range []string{layout.FenceKey("k"), layout.FenceSeenKey("k")} {
		if _, err := ss[0].Do("SET", k, 7); err != nil {
			t.Fatal(err)
		}
	}
	leftover.None(t, ss)
	leftover.None(t, ss, "k")

	if _, err := ss[1].Do("SET", "k", "tok", "PX", 60000); err != nil {
		t.Fatal(err)
	}
	if _, err := ss[1].Do("HSET", layout.MetaKey("k"), "tok", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := ss[0].Do("ZADD", layout.QueueKey("k"), 1, "w"); err != nil {
		t.Fatal(err)
	}
	for _, keys := range [][]string{nil, {"k"}} {
		r := &recorder{TB: t}
		leftover.Within(r, 50*time.Millisecond, ss, keys...)
		got := strings.Join(r.errs, "\n")
		if len(r.errs) != 3 || !strings.Contains(got, ss[1].Addr()+`: "k" (string, PTTL`) ||
			!strings.Contains(got, `"{k}:meta" (hash`) || !strings.Contains(got, ss[0].Addr()+`: "{k}:queue" (zset`) {
			t.Errorf("keys %q: reported\n%s", keys, got)
		}
	}

	go func() {
		time.Sleep(100 * time.Millisecond) // the subject: keys that go while None waits
		ss[1].Do("DEL", "k", layout.MetaKey("k"))
		ss[0].Do("DEL", layout.QueueKey("k"))
	}()
	r := &recorder{TB: t}
	leftover.Within(r, 5*time.Second, ss, "k")
	if len(r.errs) != 0 {
		t.Errorf("reported keys deleted within the bound: %q", r.errs)
	}
}
