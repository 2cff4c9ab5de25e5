package goredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

type outcome struct {
	v    any
	err  error
	info transport.SendInfo
}

func scriptNamed(t *testing.T, name string) *transport.Script {
	t.Helper()
	for _, s := range transport.Scripts() {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no script %q", name)
	return nil
}

func send(t *testing.T, tr *Transport, c *transport.Command) outcome {
	t.Helper()
	ch := make(chan outcome, 1)
	c.Deadline = time.Now().Add(5 * time.Second)
	c.Done = func(v any, err error, info transport.SendInfo) { ch <- outcome{v, err, info} }
	tr.Send(c)
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no reply within 10s")
		return outcome{}
	}
}

func newTestTransport(t *testing.T, c redis.UniversalClient) *Transport {
	tr := NewTransport(c)
	t.Cleanup(func() { tr.Close() })
	return tr
}

func TestTransport_Send_repliesInRedigoShapes(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	tr := newTestTransport(t, c)
	if tr.Addr() != s.addr || !tr.Ordered() {
		t.Fatalf("Addr %q Ordered %v", tr.Addr(), tr.Ordered())
	}
	set := func() outcome {
		return send(t, tr, &transport.Command{Name: "SET", Args: []any{"k", "tok", "NX", "PX", int64(10000)}, Reply: transport.ReplySet})
	}
	if o := set(); o.err != nil || o.v != "OK" || !o.info.Sent {
		t.Fatalf("SET NX: %+v", o)
	}
	if o := set(); o.err != nil || o.v != nil {
		t.Fatalf("SET NX on a held key: %+v", o)
	}
	release := scriptNamed(t, "release")
	for _, tc := range []struct {
		token string
		want  int64
	}{{"other", 0}, {"tok", 1}, {"tok", 0}} {
		o := send(t, tr, &transport.Command{Script: release, Name: "EVALSHA", Args: []any{"k", tc.token, ""}, NumKeys: 1, Reply: transport.ReplyFlag})
		if o.err != nil || o.v != tc.want {
			t.Fatalf("release with %s: %+v, want %d", tc.token, o, tc.want)
		}
	}
	// A bulk string is []byte, as redigo gives it.
	c.Set(context.Background(), "sha", "0123456789abcdef0123456789abcdef01234567", 0)
	o := send(t, tr, &transport.Command{Name: "GET", Args: []any{"sha"}, Reply: transport.ReplySHA})
	if b, ok := o.v.([]byte); o.err != nil || !ok || len(b) != 40 {
		t.Fatalf("GET of a SHA as ReplySHA: %+v", o)
	}
}

func TestTransport_Send_replyThatDoesNotFitIsAnError(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	tr := newTestTransport(t, c)
	c.Set(context.Background(), "k", "1", 0)
	for name, cmd := range map[string]*transport.Command{
		"bulk for a flag":     {Name: "GET", Args: []any{"k"}, Reply: transport.ReplyFlag},
		"integer for SET":     {Name: "INCR", Args: []any{"n"}, Reply: transport.ReplySet},
		"array for a counter": {Name: "LRANGE", Args: []any{"nolist", "0", "-1"}, Reply: transport.ReplyCounter},
		"double (RESP3)":      {Name: "INCRBYFLOAT", Args: []any{"f", "1.5"}, Reply: transport.ReplyFlag},
	} {
		o := send(t, tr, cmd)
		var de *desyncError
		if o.v != nil || !errors.As(o.err, &de) {
			t.Errorf("%s: %+v, want an error, never a vote", name, o)
		}
	}
}

func TestTransport_Send_errorReplyIsReplyError(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	tr := newTestTransport(t, c)
	c.HSet(context.Background(), "h", "f", "v")
	o := send(t, tr, &transport.Command{Script: scriptNamed(t, "release"), Name: "EVALSHA", Args: []any{"h", "tok", ""}, NumKeys: 1, Reply: transport.ReplyFlag})
	var re transport.ReplyError
	if !errors.As(o.err, &re) || o.v != nil || !o.info.Sent {
		t.Fatalf("WRONGTYPE: %+v, want a transport.ReplyError", o)
	}
}

func TestTransport_Close(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	tr := NewTransport(c)
	n := newNotices()
	sub, err := tr.Subscribe(context.Background(), n.notify)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Done():
	default:
		t.Fatal("subscription open after Close")
	}
	o := send(t, tr, &transport.Command{Name: "SET", Args: []any{"k", "v"}, Reply: transport.ReplySet})
	if !errors.Is(o.err, redlock.ErrClosed) || o.info.Sent {
		t.Fatalf("Send after Close: %+v", o)
	}
	if _, err := tr.Subscribe(context.Background(), n.notify); !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Subscribe after Close: %v", err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the caller's client was closed: %v", err)
	}
}

func TestTransport_RedactError(t *testing.T) {
	tr := NewTransport(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Username: "lockuser", Password: "s3cret-pw"}))
	defer tr.client.Close()
	defer tr.Close()
	base := errors.New("WRONGPASS for lockuser with s3cret-pw")
	err := tr.RedactError(base)
	if got := err.Error(); got != "WRONGPASS for [redacted] with [redacted]" || !errors.Is(err, base) {
		t.Fatalf("redacted: %q", got)
	}
	plain := errors.New("nothing secret")
	if tr.RedactError(plain) != plain {
		t.Fatal("an error without credentials was changed")
	}
}
