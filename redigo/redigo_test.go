package redigo_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNew_refusesNoPoolsAndANilPool(t *testing.T) {
	if c, err := redigo.New(nil); !errors.Is(err, redlock.ErrInvalid) || c != nil {
		t.Errorf("no pools: client %v, err %v; want ErrInvalid", c, err)
	}
	var nilPool *pool.RedisPool
	if c, err := redigo.New([]pool.Pool{nilPool}, redigo.WithPipelining(false)); !errors.Is(err, redlock.ErrInvalid) || c != nil {
		t.Errorf("a nil pool: client %v, err %v; want ErrInvalid", c, err)
	}
}

func TestNewFromAddrs_badAddressIsInvalidAndLeavesNothingOpen(t *testing.T) {
	c, err := redigo.NewFromAddrs([]string{"127.0.0.1:1", "redis://[bad", "127.0.0.1:2"}, redigo.WithPoolOptions())
	if !errors.Is(err, redlock.ErrInvalid) || c != nil {
		t.Fatalf("client %v, err %v; want ErrInvalid", c, err)
	}
}

func TestNewFromAddrs_makesAClientThatCloses(t *testing.T) {
	c, err := redigo.NewFromAddrs([]string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, redlock.WithTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if c.Masters() != 3 {
		t.Errorf("%d masters, want 3", c.Masters())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
