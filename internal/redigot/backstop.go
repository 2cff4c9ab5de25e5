package redigot

import (
	"errors"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
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

// receive is redis.ReceiveWithTimeout with the backstop: a panic of the
// parser becomes an error, and the caller breaks the connection.
func receive(conn redis.Conn, timeout time.Duration) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fault.PanicError(p)
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

// replyTo returns the master's error reply (a RESP "-" line, as redigo
// reports it) that err is, also behind a wrapper a user's connection or
// pool may add. A failure that holds a reply to another command as its
// cause is not a reply to this one: a dial refused by AUTH or HELLO
// (*pool.DialError), a command never sent (*notTriedError,
// *transport.NotSentError), a failed
// ASKING (*clusterNodeError).
func replyTo(err error) (redis.Error, bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return "", false
	}
	var (
		de *pool.DialError
		nt *transport.NotSentError
		ns *transport.NotSentError
		ce *clusterNodeError
	)
	if errors.As(err, &de) || errors.As(err, &nt) || errors.As(err, &ns) || errors.As(err, &ce) {
		return "", false
	}
	return re, true
}

// answered marks a guarded connection's protocol error for the Client
// (fault.BadBytesError): the master answered, with bytes no server sends.
func answered(err error) error {
	var pe *pool.ProtocolError
	if err != nil && errors.As(err, &pe) {
		return &fault.BadBytesError{Err: err}
	}
	return err
}
