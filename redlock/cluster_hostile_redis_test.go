package redlock_test

// Quorum members that are Redis Clusters (cluster://SEED+SEED), with a
// hostile node as the seed: what it says about other nodes (MOVED, ASK,
// CLUSTER SLOTS) is untrusted bytes. Real clusters are tested in the
// integration module (integration/redigocluster_redis_test.go).

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/slots"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// A seed that answers every command with a redirection to an address the
// member may not name (off loopback, garbage, a port or slot out of
// range) fails
// that member's commands, with an error naming the member and saying why;
// nothing is dialed there, and the quorum of the other members goes on.
func TestClusterMember_hostileRedirect(t *testing.T) {
	redistest.SkipShort(t)
	reals := redistest.Start(t, 2)
	for _, redir := range []string{
		"-MOVED %d 192.0.2.1:6379\r\n",      // off loopback (TEST-NET-1)
		"-ASK %d 10.1.2.3:7000\r\n",         // off loopback
		"-MOVED %d 127.0.0.1:99999\r\n",     // no such port
		"-MOVED %d \x01\x02garbage\r\n",     // not host:port
		"-MOVED 99999 127.0.0.1:6379\r\n",   // no such slot
		"-MOVED %d [::ffff:8.8.8.8]:53\r\n", // off loopback, as IPv6
	} {
		t.Run(strings.TrimSpace(strings.ReplaceAll(redir, "%d", "N")), func(t *testing.T) {
			var cmds atomic.Int64
			seed := hostile.Start(t, func(w io.Writer, cmd []string, _ <-chan struct{}) error {
				cmds.Add(1)
				if len(cmd) == 3 && cmd[0] == "SCRIPT" && strings.EqualFold(cmd[1], "LOAD") {
					// As a node would: the pipelined connection loads the
					// scripts first.
					_, err := fmt.Fprintf(w, "$40\r\n%x\r\n", sha1.Sum([]byte(cmd[2])))
					return err
				}
				slot := 0
				if len(cmd) > 3 && (cmd[0] == "EVALSHA" || cmd[0] == "EVAL") {
					slot = keySlot(cmd[3])
				} else if len(cmd) > 1 && cmd[0] == "SET" {
					slot = keySlot(cmd[1])
				}
				msg := redir
				if strings.Contains(msg, "%d") {
					msg = fmt.Sprintf(redir, slot)
				}
				_, err := io.WriteString(w, msg)
				return err
			})
			member := "cluster://" + seed
			c, err := redigo.NewFromAddrs([]string{member, reals[0].Addr(), reals[1].Addr()},
				redlock.WithTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := c.Acquire(ctx, "{hostile}:lock", redlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatalf("the two honest masters are a quorum: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// The member alone: its error names it and says why.
			one, err := redigo.NewFromAddrs([]string{member}, redlock.WithTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			_, err = one.TryAcquire(ctx, "{hostile}:lock")
			if err == nil {
				t.Fatal("a member whose only node redirects elsewhere granted a lock")
			}
			msg := err.Error()
			if !strings.Contains(msg, member) {
				t.Errorf("error does not name the member %s: %v", member, err)
			}
			if !strings.Contains(msg, "not dialed") && !strings.Contains(msg, "bad cluster member") {
				t.Errorf("error does not say the redirection was refused: %v", err)
			}
			if strings.Contains(msg, "\x01") {
				t.Errorf("error quotes control bytes from the node: %q", msg)
			}
			t.Logf("%v", err)
		})
	}
}

// keySlot is the cluster slot of key (CRC16 of its hash tag or whole).
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % slots.ClusterSlots
}

// A seed whose CLUSTER SLOTS reply never ends (an array header of a
// billion entries, then entries without end) costs the client bounded
// memory: the pool's guard refuses the reply, the member fails, and the
// lock commands sent to it (answered the same way) fail too.
func TestClusterMember_hugeClusterSlots(t *testing.T) {
	redistest.SkipShort(t)
	seed := hostile.Start(t, hostile.Stream("*1000000000\r\n", "*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$40\r\n0123456789012345678901234567890123456789\r\n"))
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c, err := redigo.NewFromAddrs([]string{"cluster://" + seed}, redlock.WithTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		if _, err := c.TryAcquire(ctx, "{huge}:lock"); err == nil {
			t.Fatal("granted by a node that streams garbage")
		} else if i == 0 {
			t.Logf("%v", err)
		}
		time.Sleep(100 * time.Millisecond) // let a refresh run
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.TotalAlloc) - int64(before.TotalAlloc); grew > 512<<20 {
		t.Errorf("allocated %d MiB reading a hostile CLUSTER SLOTS", grew>>20)
	} else {
		t.Logf("allocated %d MiB in all", grew>>20)
	}
	if after.HeapInuse > before.HeapInuse+128<<20 {
		t.Errorf("heap in use grew from %d to %d MiB", before.HeapInuse>>20, after.HeapInuse>>20)
	}
}

// The member's spec is checked in NewFromAddrs: credentials, too many
// seeds, bad addresses are refused with ErrInvalid, without quoting what
// may be a password.
func TestNewFromAddrs_clusterSpec(t *testing.T) {
	for _, spec := range []string{
		"cluster://",
		"cluster://user:secret@127.0.0.1:7000",
		"cluster://127.0.0.1:7000+127.0.0.1:0",
		"cluster://127.0.0.1",
		"cluster://" + strings.Repeat("127.0.0.1:7000+", 64) + "127.0.0.1:7000",
	} {
		_, err := redigo.NewFromAddrs([]string{spec})
		if !errors.Is(err, redlock.ErrInvalid) || !errors.Is(err, pool.ErrBadCluster) {
			t.Errorf("%.40q: %v, want ErrInvalid and pool.ErrBadCluster", spec, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error quotes the password: %v", err)
		}
	}
	// Two members with the same seeds, in any order, are one member.
	_, err := redigo.NewFromAddrs([]string{"cluster://127.0.0.1:7000+127.0.0.1:7001", "cluster://127.0.0.1:7001+127.0.0.1:7000"})
	if !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("a cluster given twice: %v, want ErrInvalid", err)
	}
}
