package pool_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseURL(t *testing.T) {
	cases := []struct {
		url, addr, bad string
	}{
		{url: "redis://127.0.0.1:6380", addr: "127.0.0.1:6380"},
		{url: "redis://localhost", addr: "localhost:6379"},
		{url: "redis://:pw@h:1/3", addr: "h:1"},
		{url: "redis://user:pw@h:1/", addr: "h:1"},
		{url: "rediss://[::1]:7000/0", addr: "[::1]:7000"},
		{url: "", bad: "empty"},
		{url: "127.0.0.1:6379", bad: "scheme"},
		{url: "http://h:1", bad: `scheme "http"`},
		{url: "redis://h:0", bad: "port"},
		{url: "redis://h:99999", bad: "port"},
		{url: "redis://h:", bad: "empty port"},
		{url: "redis://:6379", bad: "host is empty"},
		{url: "redis://h:1/x", bad: "database"},
		{url: "redis://h:1/-1", bad: "database"},
		{url: "redis://user@h:1", bad: "no password"},
		{url: "redis://h:1?db=2", bad: "query"},
		{url: "redis:h", bad: "want redis://host:port"},
		{url: "redis://user:s3cret@h:port", bad: ""},
		{url: "redis://user:s3cret@h%zz:1", bad: ""},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			addr, _, err := pool.ParseURL(tc.url)
			if tc.addr != "" {
				if err != nil || addr != tc.addr {
					t.Fatalf("ParseURL = %q, %v; want %q", addr, err, tc.addr)
				}
				return
			}
			if !errors.Is(err, pool.ErrBadURL) {
				t.Fatalf("err = %v, want ErrBadURL", err)
			}
			if !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("err %q does not say %q", err, tc.bad)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("err %q shows the password", err)
			}
		})
	}
}

func TestNew_rejectsBadSettings(t *testing.T) {
	cases := []struct {
		addr string
		opts []pool.Option
		want string
	}{
		{"nohostport", nil, "not host:port"},
		{"h:abc", nil, "port"},
		{":1", nil, "host is empty"},
		{"h:1", []pool.Option{pool.WithReadTimeout(0)}, "read timeout"},
		{"h:1", []pool.Option{pool.WithWriteTimeout(-1)}, "write timeout"},
		{"h:1", []pool.Option{pool.WithConnectTimeout(0)}, "connect timeout"},
		{"h:1", []pool.Option{pool.WithMaxIdle(-1)}, "limits"},
		{"h:1", []pool.Option{pool.WithDB(-2)}, "database"},
		{"h:1", []pool.Option{pool.WithAuth("u", "")}, "username needs a password"},
	}
	for _, tc := range cases {
		if _, err := pool.New(tc.addr, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q): %v, want an error about %q", tc.addr, err, tc.want)
		}
	}
}

func TestRedisPool_GetContext(t *testing.T) {
	srv := redistest.StartOne(t)
	p := srv.Pool()
	if p.Addr() != srv.Addr() || p.String() != "redis://"+srv.Addr()+"/0" {
		t.Errorf("Addr, String = %q, %q", p.Addr(), p.String())
	}
	c, err := p.GetContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(redis.ConnWithTimeout); !ok {
		t.Error("connection does not support ConnWithTimeout")
	}
	if got, err := redis.String(redis.DoWithTimeout(c, time.Second, "PING")); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	c.Close()
	if st := p.Stats(); st.IdleCount != 1 {
		t.Errorf("idle connections = %d, want 1", st.IdleCount)
	}
}

func TestNewFromURL_authAndDB(t *testing.T) {
	srv := redistest.StartOne(t, redistest.WithConfig("requirepass", "s3cret"))
	good, err := pool.NewFromURL("redis://:s3cret@" + srv.Addr() + "/2")
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	c, err := good.GetContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("SET", "in-db-2", "x"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n, _ := redis.Int(srv.Do("EXISTS", "in-db-2")); n != 0 {
		t.Error("the key went to db 0, not db 2")
	}

	bad, err := pool.NewFromURL("redis://:wrong-s3cret@" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = bad.GetContext(context.Background())
	var de *pool.DialError
	if !errors.As(err, &de) || de.Addr != srv.Addr() {
		t.Fatalf("wrong password: %v, want a *DialError naming %s", err, srv.Addr())
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error shows the password: %v", err)
	}
}

func TestRedisPool_deadConnectionIsReplaced(t *testing.T) {
	srv := redistest.StartOne(t)
	p := srv.Pool(pool.WithHealthCheckAfter(0))
	c, err := p.GetContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := srv.Restart(); err != nil { // the idle connection is now dead
		t.Fatal(err)
	}
	c, err = p.GetContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := redis.DoWithTimeout(c, time.Second, "PING"); err != nil {
		t.Fatalf("the health check gave out a dead connection: %v", err)
	}
}

func TestRedisPool_hungMasterHonoursCtx(t *testing.T) {
	srv := redistest.StartOne(t)
	p := srv.Pool(pool.WithHealthCheckAfter(0))
	c, err := p.GetContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err = p.GetContext(ctx)
	if err == nil {
		// The idle connection failed its check; a new dial completes at
		// the kernel level even to a stopped process. A command must still
		// be bounded.
		_, err = redis.DoWithTimeout(c, time.Until(start.Add(100*time.Millisecond)), "PING")
		c.Close()
	}
	if err == nil {
		t.Fatal("a paused master answered")
	}
	// Far below the pool's 1s read timeout: the caller's bound won.
	if el := time.Since(start); el > 900*time.Millisecond {
		t.Errorf("took %v with a 100ms bound", el)
	}
}

// Credentials typed in the wrong place are never quoted back.
func TestNew_neverQuotesCredentials(t *testing.T) {
	const secret = "Secret99pw"
	for _, f := range []func() error{
		func() error { _, err := pool.New("user:" + secret + "@127.0.0.1:6379"); return err },
		func() error { _, err := pool.New(secret + "@127.0.0.1:6379"); return err },
		func() error { _, err := pool.NewFromURL("redis://" + secret + "@127.0.0.1:6379"); return err },
		func() error { _, err := pool.NewFromURL("redis://127.0.0.1:6379/" + secret); return err },
		func() error { _, _, err := pool.ParseURL("redis://" + secret + "@127.0.0.1"); return err },
	} {
		err := f()
		if err == nil {
			t.Fatal("no error")
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error quotes the secret: %v", err)
		}
	}
}

// A master whose AUTH was renamed away quotes AUTH's arguments in its
// error; the pool's error does not.
func TestRedisPool_redactsEchoedCredentials(t *testing.T) {
	const user, secret = "locker", "RealPw99"
	srv := redistest.StartOne(t, redistest.WithArgs("--rename-command", "AUTH", ""))
	p, err := pool.NewFromURL("redis://" + user + ":" + secret + "@" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.GetContext(context.Background())
	var de *pool.DialError
	var re redis.Error
	if !errors.As(err, &de) || !errors.As(err, &re) || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("err = %v, want a DialError around the master's redis.Error", err)
	}
	for _, s := range []string{err.Error(), string(re), fmt.Sprintf("%#v %+v", err, err)} {
		if strings.Contains(s, secret) || strings.Contains(s, "'"+user+"'") {
			t.Errorf("the error shows the credentials: %s", s)
		}
	}
	if got := p.Redact("x " + secret + " y " + user + " users"); got != "x [redacted] y [redacted] users" {
		t.Errorf("Redact = %q", got)
	}
}

// A dial error names the master's address once.
func TestDialError_namesTheAddressOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	p, err := pool.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, err := p.GetContext(context.Background())
	if err == nil {
		conn.Close()
		t.Skip("something listens on the freed port")
	}
	var de *pool.DialError
	if !errors.As(err, &de) || de.Addr != addr {
		t.Fatalf("error %v (%T) is not a DialError for %s", err, err, addr)
	}
	if n := strings.Count(err.Error(), addr); n != 1 {
		t.Errorf("%q names %s %d times, want once", err, addr, n)
	}
}
