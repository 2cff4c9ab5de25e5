package redlock

import (
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/pool"
)

// Untrusted masters.
//
// The pools of package pool guard every connection (pool.GuardConn): a
// reply that breaks the RESP framing or the pool's limits breaks the
// connection with a *pool.ProtocolError before redigo's parser sees it, so
// a hostile master is one failed master, never a crash. A pool of another
// kind (a plain *redis.Pool) is not guarded, since this package does not
// own its connections (its own dial function makes the pipelined and
// subscribed ones too): there the goroutines that read replies have a
// backstop, a recover that turns a panic of the parser (a header such as
// "$300000000000000" makes redigo panic) into a failed vote or a broken
// connection. It cannot catch a stack overflow (arrays nested millions
// deep), nor a panic on a goroutine redigo starts itself (DoContext,
// dialing with AUTH): guard such pools by dialing through pool.GuardConn
// (redis.DialContextFunc; see its example).

// errPanic is matched by the error of a master whose reply made the reply
// parser panic (only on pools that package pool did not make).
var errPanic = errors.New("redlock: the reply parser panicked")

// ErrPanic is matched by the error of a master whose reply made the reply
// parser panic.
//
// Deprecated: a failed master's error is a *NodeError whatever failed it;
// match that. ErrPanic is removed in the next minor release.
var ErrPanic = errPanic

// panicError turns a recovered value into an error that matches errPanic.
func panicError(p any) error { return fmt.Errorf("%w: %v", errPanic, p) }

// receive is redis.ReceiveWithTimeout with the backstop: a panic of the
// parser becomes an error, and the caller breaks the connection.
func receive(conn redis.Conn, timeout time.Duration) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, panicError(p)
		}
	}()
	return redis.ReceiveWithTimeout(conn, timeout)
}

// closeQuietly closes a subscriber's connection. A subscribed connection
// of a redis.Pool reads on as it closes (it unsubscribes first), and its
// parser may panic again on a hostile master: the connection is then left
// to the garbage collector.
func closeQuietly(conn redis.Conn) {
	defer func() { _ = recover() }()
	conn.Close()
}

// redact removes the credentials the master's pool knows of from err's
// text (pool.Redactor); other pools' errors are returned as they are.
func (m *master) redact(err error) error {
	if r, ok := m.t.(pool.Redactor); ok {
		return r.RedactError(err)
	}
	return err
}
