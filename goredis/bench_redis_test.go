package goredis

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/transport"
)

// BenchmarkTransport_setRelease runs SET NX PX + the release script
// through one Transport from many goroutines (b.SetParallelism), one
// master; compare BenchmarkDirect_setRelease (go-redis calls, one command
// per round trip).
func BenchmarkTransport_setRelease(b *testing.B) {
	s := startServer(b)
	c := newClientB(b, s)
	tr := NewTransport(c)
	defer tr.Close()
	var release *transport.Script
	for _, sc := range transport.Scripts() {
		if sc.Name() == "release" {
			release = sc
		}
	}
	var id atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "k" + strconv.FormatInt(id.Add(1), 10)
		ch := make(chan error, 1)
		done := func(v any, err error, _ transport.SendInfo) { ch <- err }
		for pb.Next() {
			for _, cmd := range []*transport.Command{
				{Name: "SET", Args: []any{key, "tok", "NX", "PX", int64(10000)}, Reply: transport.ReplySet},
				{Script: release, Name: "EVALSHA", Args: []any{key, "tok", ""}, NumKeys: 1, Reply: transport.ReplyFlag},
			} {
				cmd.Deadline = time.Now().Add(5 * time.Second)
				cmd.Done = done
				tr.Send(cmd)
				if err := <-ch; err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
}

func BenchmarkDirect_setRelease(b *testing.B) {
	s := startServer(b)
	c := newClientB(b, s)
	ctx := context.Background()
	var id atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "k" + strconv.FormatInt(id.Add(1), 10)
		for pb.Next() {
			if err := c.SetNX(ctx, key, "tok", 10*time.Second).Err(); err != nil {
				b.Error(err)
				return
			}
			if err := c.EvalSha(ctx, "0", []string{key}, "tok", "").Err(); err == nil {
				b.Error("want NOSCRIPT")
				return
			}
		}
	})
}
