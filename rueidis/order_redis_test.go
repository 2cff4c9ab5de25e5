package rueidis

import (
	"strings"
	"testing"
	"time"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/transport"
)

// A standalone client's lock commands all go through one of its
// pipelined connections, however many it multiplexes over
// (PipelineMultiplex): rueidis picks a connection at random for a command
// with a key slot, so batches with keys could overtake one another on two
// connections after one was given up at its deadline, unanswered.
func TestLane_standaloneCommandsShareOneConnection(t *testing.T) {
	s := redistest.StartOne(t)
	c := dial(t, s.Addr(), func(o *lib.ClientOption) { o.PipelineMultiplex = 2 })
	tr := NewTransport(c)
	defer tr.Close()
	done := make(chan error, 1)
	for i := 0; i < 32; i++ {
		tr.Send(&transport.Command{Name: "SET", Args: []any{"k" + string(rune('a'+i%26)), "v", "PX", int64(10000)},
			Reply: transport.ReplySet, Deadline: time.Now().Add(2 * time.Second),
			Done: func(_ any, err error, _ transport.SendInfo) { done <- err }})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	v, err := s.Do("CLIENT", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	list := string(v.([]byte))
	if n := strings.Count(list, " cmd=set "); n != 1 {
		t.Fatalf("%d connections ran the SETs, want 1:\n%s", n, list)
	}
}
