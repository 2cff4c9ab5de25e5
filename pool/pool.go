// Package pool holds the connections to one Redis master.
//
// The redlock coordinator asks a master for nothing but a connection, through
// the small Pool interface. A *redis.Pool from github.com/gomodule/redigo
// satisfies it as is, so callers can hand in pools they already tune and
// monitor. New and NewFromURL build a pool with settings suited to locking:
// bounded dials, reads and writes, a health check of connections that sat
// idle, and an address that errors can name without naming credentials.
// Every connection they make reads through a guard (GuardConn) that checks
// the RESP framing and Limits before redigo's parser trusts a length, so a
// hostile master costs a broken connection, never a crash or gigabytes.
//
// What a pool can do beyond Pool it says through small exported interfaces,
// which the redlock client finds with a type assertion, so that a pool that
// wraps another passes an ability on by implementing the method too:
// Addresser (the master's address, for errors), Redactor (credentials kept
// out of errors) and Dialer (connections of its own, for pipelining). A
// *redis.Pool pipelines through its DialContext or Dial field, with the
// caller's dial settings.
//
// The connections of a *redis.Pool of the caller's own are not guarded: the
// redlock client does not own them. Its reader goroutines recover a panic
// of redigo's parser (a failed master, a *redlock.NodeError), but no recover
// stops a stack overflow, nor a panic on a goroutine redigo starts itself.
// To guard them, dial through GuardConn with redis.DialContextFunc (see
// the example of GuardConn).
package pool

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Pool gives out connections to one Redis master.
//
// GetContext must honour ctx while it waits for or dials a connection, and
// the connection it returns must support redis.ConnWithTimeout (every
// connection of a redigo pool does). The caller closes the connection when
// done with it. Implementations must be safe for concurrent use.
type Pool interface {
	GetContext(ctx context.Context) (redis.Conn, error)
}

// Addresser is implemented by pools that know the address of their master.
// Errors and logs name a master by this address; a pool without it is named
// by its position in the list of masters.
type Addresser interface {
	Addr() string
}

// Dialer is implemented by pools that can make a connection of their own to
// their master, outside the pool (not counted against its limits, not given
// back, closed by the caller). The redlock client pipelines through it: one
// such connection per master for all its goroutines, one more while waiters
// wait. A *RedisPool implements it; a pool that wraps one passes the
// ability on by implementing Dial too. Dial must honour ctx while it dials,
// the connection must support redis.ConnWithTimeout, and implementations
// must be safe for concurrent use.
type Dialer interface {
	Dial(ctx context.Context) (redis.Conn, error)
}

// A ReadWaiter waits for the next reply on a connection to arrive whole,
// without consuming it, so that a reader that stops waiting leaves the
// connection as it was (redigo takes a read that timed out as a broken
// connection). WaitReadable returns nil once the whole reply has arrived
// (or the connection failed: the next read says how), and an error
// matching os.ErrDeadlineExceeded at deadline or ctx's error, with nothing
// consumed. It must not be called while another goroutine reads the
// connection. The redlock client reads a lone master's reply with it
// (docs/design.md, "A lone master's reply is read by its caller").
type ReadWaiter interface {
	WaitReadable(ctx context.Context, deadline time.Time) error
}

// A WaitDialer is a Dialer whose connections come with a ReadWaiter
// (nil when a connection has none). A *RedisPool implements it; a pool
// that wraps one passes the ability on by implementing DialWaiter too.
type WaitDialer interface {
	Dialer
	DialWaiter(ctx context.Context) (redis.Conn, ReadWaiter, error)
}

// Compile-time checks that both pool types fit the interfaces.
var (
	_ Pool       = (*redis.Pool)(nil)
	_ Pool       = (*RedisPool)(nil)
	_ WaitDialer = (*RedisPool)(nil)
	_ Addresser  = (*RedisPool)(nil)
	_ Dialer     = (*RedisPool)(nil)
)

// Defaults used by New and NewFromURL.
const (
	DefaultConnectTimeout   = time.Second
	DefaultReadTimeout      = time.Second
	DefaultWriteTimeout     = time.Second
	DefaultMaxIdle          = 16
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultHealthCheckAfter = time.Minute
)

// RedisPool is a redigo pool of connections to one master together with the
// master's address. Make one with New or NewFromURL; it is safe for
// concurrent use and must not be copied after first use.
type RedisPool struct {
	addr string // host:port, never credentials
	db   int
	tls  bool
	pool redis.Pool

	// dialOpts are the options of every dial; dialOpts[guardedAt] is
	// the guarded dial, which DialWaiter replaces by one that keeps the
	// guard it made.
	dialOpts       []redis.DialOption
	guarded        func(ctx context.Context, network, addr string) (net.Conn, error)
	connectTimeout time.Duration

	secrets *redactor // the credentials, kept out of errors
}

// Option configures a RedisPool made by New or NewFromURL.
type Option func(*options)

type options struct {
	connectTimeout   time.Duration
	readTimeout      time.Duration
	writeTimeout     time.Duration
	maxIdle          int
	maxActive        int
	idleTimeout      time.Duration
	healthCheckAfter time.Duration
	username         string
	password         string
	db               int
	useTLS           bool
	tlsConfig        *tls.Config // nil: the defaults
	limits           Limits
	dialOptions      []redis.DialOption
}

// WithConnectTimeout bounds the time to dial a connection and authenticate
// on it. The default is DefaultConnectTimeout; the caller's context can
// shorten it.
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.connectTimeout = d } }

// WithReadTimeout bounds a read from the master when the caller gives no
// tighter bound. The redlock coordinator always gives its per-master
// timeout. The default is DefaultReadTimeout.
func WithReadTimeout(d time.Duration) Option { return func(o *options) { o.readTimeout = d } }

// WithWriteTimeout bounds each write to the master (a full socket buffer
// towards a hung master blocks a write). The default is DefaultWriteTimeout.
func WithWriteTimeout(d time.Duration) Option { return func(o *options) { o.writeTimeout = d } }

// WithMaxIdle sets how many idle connections are kept. The default is
// DefaultMaxIdle.
func WithMaxIdle(n int) Option { return func(o *options) { o.maxIdle = n } }

// WithMaxActive caps the connections open at once; callers beyond the cap
// wait for one, bounded by their context. The default, 0, sets no cap.
func WithMaxActive(n int) Option { return func(o *options) { o.maxActive = n } }

// WithIdleTimeout closes connections idle for longer than d. The default
// is DefaultIdleTimeout.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idleTimeout = d } }

// WithHealthCheckAfter makes a connection that sat idle for longer than d
// answer a PING before it is given out. The default is
// DefaultHealthCheckAfter; 0 checks every borrowed connection.
func WithHealthCheckAfter(d time.Duration) Option {
	return func(o *options) { o.healthCheckAfter = d }
}

// WithAuth authenticates every connection. An empty username uses the
// master's default user.
func WithAuth(username, password string) Option {
	return func(o *options) { o.username, o.password = username, password }
}

// WithDB selects a database on every connection. The default is 0.
func WithDB(db int) Option { return func(o *options) { o.db = db } }

// WithLimits bounds what one reply from the master may be (see Limits);
// zero fields keep their defaults.
func WithLimits(l Limits) Option { return func(o *options) { o.limits = l } }

// WithDialOptions adds redigo dial options, applied after the pool's own
// (for example redis.DialClientName). The pool dials and speaks TLS itself,
// so that it can guard every connection (see GuardConn): redigo's TLS
// options (redis.DialUseTLS, redis.DialTLSConfig) have no place here — use
// WithTLS — and a redis.DialContextFunc here would replace the guarded dial.
func WithDialOptions(opts ...redis.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// New returns a pool of connections to the master at addr ("host:port").
// It does not connect: the first connection is dialed when first needed.
//
// An address with '@' in it (credentials given the way a URL gives them)
// is refused without being quoted: give credentials with WithAuth, or use
// NewFromURL.
func New(addr string, opts ...Option) (*RedisPool, error) {
	if strings.Contains(addr, "@") {
		return nil, errors.New("pool: an address must be host:port, and this one has '@' in it (not quoted here, in case it holds a password): give credentials with WithAuth, or write a redis:// URL")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("pool: address %q is not host:port: %w", addr, err)
	}
	if err := checkHostPort(host, port); err != nil {
		return nil, fmt.Errorf("pool: address %q: %w", addr, err)
	}
	return build(net.JoinHostPort(host, port), opts)
}

func build(addr string, opts []Option) (*RedisPool, error) {
	o := options{
		connectTimeout:   DefaultConnectTimeout,
		readTimeout:      DefaultReadTimeout,
		writeTimeout:     DefaultWriteTimeout,
		maxIdle:          DefaultMaxIdle,
		idleTimeout:      DefaultIdleTimeout,
		healthCheckAfter: DefaultHealthCheckAfter,
	}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.connectTimeout <= 0:
		return nil, fmt.Errorf("pool: %s: connect timeout must be positive, got %v", addr, o.connectTimeout)
	case o.readTimeout <= 0:
		return nil, fmt.Errorf("pool: %s: read timeout must be positive, got %v", addr, o.readTimeout)
	case o.writeTimeout <= 0:
		return nil, fmt.Errorf("pool: %s: write timeout must be positive, got %v", addr, o.writeTimeout)
	case o.maxIdle < 0, o.maxActive < 0:
		return nil, fmt.Errorf("pool: %s: connection limits must not be negative", addr)
	case o.db < 0:
		return nil, fmt.Errorf("pool: %s: database must not be negative, got %d", addr, o.db)
	case o.username != "" && o.password == "":
		return nil, fmt.Errorf("pool: %s: a username needs a password", addr)
	}

	// The pool dials, and speaks TLS, itself: the guard must read what
	// the master sends in the clear, and the handshake must be bounded by
	// the dial's context.
	guarded := guardedDial(o.useTLS, o.tlsConfig, o.limits)
	dialOpts := []redis.DialOption{
		redis.DialReadTimeout(o.readTimeout),
		redis.DialWriteTimeout(o.writeTimeout),
		redis.DialContextFunc(guarded), // dialOpts[guardedAt]
	}
	if o.password != "" {
		dialOpts = append(dialOpts, redis.DialUsername(o.username), redis.DialPassword(o.password))
	}
	if o.db != 0 {
		dialOpts = append(dialOpts, redis.DialDatabase(o.db))
	}
	dialOpts = append(dialOpts, o.dialOptions...)
	secrets := newRedactor(o.username, o.password)

	p := &RedisPool{addr: addr, db: o.db, tls: o.useTLS, secrets: secrets,
		dialOpts: dialOpts, guarded: guarded, connectTimeout: o.connectTimeout}
	connectTimeout := o.connectTimeout
	healthAfter := o.healthCheckAfter
	p.pool = redis.Pool{
		MaxIdle:     o.maxIdle,
		MaxActive:   o.maxActive,
		Wait:        o.maxActive > 0,
		IdleTimeout: o.idleTimeout,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return p.dial(ctx, p.dialOpts)
		},
		TestOnBorrowContext: func(ctx context.Context, c redis.Conn, lastUsed time.Time) error {
			if time.Since(lastUsed) < healthAfter {
				return nil
			}
			timeout := connectTimeout
			if dl, ok := ctx.Deadline(); ok {
				timeout = time.Until(dl)
			}
			if timeout <= 0 {
				return context.DeadlineExceeded
			}
			_, err := redis.DoWithTimeout(c, timeout, "PING")
			return err
		},
	}
	return p, nil
}

// GetContext returns a connection to the master, honouring ctx while it
// waits for a free connection or dials a new one. Close the connection to
// give it back; a connection that failed is discarded, never reused.
func (p *RedisPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Dial returns a new connection of its own, outside the pool, for uses
// that keep a connection (a pipelined connection, a pub/sub subscription),
// dialed and guarded as the pool's own. The caller closes it. Dial makes
// RedisPool a Dialer.
func (p *RedisPool) Dial(ctx context.Context) (redis.Conn, error) {
	return p.pool.DialContext(ctx)
}

// dial makes a connection with opts, bounded by the connect timeout.
func (p *RedisPool) dial(ctx context.Context, opts []redis.DialOption) (redis.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.connectTimeout)
	defer cancel()
	c, err := redis.DialContext(ctx, "tcp", p.addr, opts...)
	if err != nil {
		return nil, &DialError{Addr: p.addr, Err: p.secrets.redactError(err)}
	}
	return c, nil
}

// guardedAt is where the guarded dial is among a RedisPool's dial options.
const guardedAt = 2

// DialWaiter is Dial, and also returns the connection's ReadWaiter: the
// guard under the connection, which can wait for the master's next reply
// to arrive whole without consuming it. It is nil when a dial option
// of the caller's (WithDialOptions) replaced the pool's guarded dial.
// DialWaiter makes RedisPool a WaitDialer.
func (p *RedisPool) DialWaiter(ctx context.Context) (redis.Conn, ReadWaiter, error) {
	var g *guardConn
	opts := slices.Clone(p.dialOpts)
	opts[guardedAt] = redis.DialContextFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := p.guarded(ctx, network, addr)
		g, _ = c.(*guardConn)
		return c, err
	})
	c, err := p.dial(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	if g == nil {
		return c, nil, nil
	}
	return c, g, nil
}

// Addr returns the master's address as host:port.
func (p *RedisPool) Addr() string { return p.addr }

// String returns the master as a URL without credentials, for logs.
func (p *RedisPool) String() string {
	scheme := "redis"
	if p.tls {
		scheme = "rediss"
	}
	return scheme + "://" + p.addr + "/" + strconv.Itoa(p.db)
}

// Stats returns the pool's connection counts.
func (p *RedisPool) Stats() redis.PoolStats { return p.pool.Stats() }

// Close closes the idle connections and makes later GetContext calls fail.
// Connections in use are closed when they are given back.
func (p *RedisPool) Close() error { return p.pool.Close() }

// DialError reports that a connection to a master could not be made.
type DialError struct {
	Addr string // host:port of the master
	Err  error
}

// Error names the master and the reason, the address once: a net
// package error names it already ("dial tcp 127.0.0.1:6379: connect:
// connection refused").
func (e *DialError) Error() string {
	msg := e.Err.Error()
	if strings.Contains(msg, e.Addr) {
		return "pool: " + msg
	}
	return "pool: dial " + e.Addr + ": " + msg
}

// Unwrap returns the underlying error.
func (e *DialError) Unwrap() error { return e.Err }

func checkHostPort(host, port string) error {
	if host == "" {
		return errors.New("host is empty")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}
