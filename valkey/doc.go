// Package valkey plugs valkey-go clients (github.com/valkey-io/valkey-go)
// into quorumlock: a redlock.Transport per master over a valkey.Client the
// caller already has (its dialer, TLS, credentials, connections and hooks
// stay as they are). It lives in a module of its own, so the core module
// never depends on valkey-go.
//
// valkey-go is a fork of rueidis whose API differs only in names, and
// this package is the rueidis adapter (module
// github.com/quorumlock/quorumlock/rueidis) with those names changed:
// every other file here is generated from that package's by internal/gen
// (go generate), and a test checks that they are current. Its
// documentation describes both: New and NewTransport, the lane that keeps
// each master's commands in order on the client's auto-pipelined
// connection, why valkey-go never retries a lock command (the commands
// are built without valkey-go's retryable tag), the bounds on a master
// that does not answer, the release notices on a dedicated connection's
// pub/sub hooks, Inspect and Close.
package valkey

//go:generate go run ./internal/gen
