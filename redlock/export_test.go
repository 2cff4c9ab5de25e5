package redlock

// Backoff exposes the retry delay for tests.
var Backoff = backoff

// Sizes reports the client's per-key and per-connection bookkeeping, for
// tests that check it stays bounded: in-flight releases tracked, keys
// with waiters, live pipelined connections.
func (c *Client) Sizes() (releasing, waitedKeys, muxConns int) {
	c.mu.Lock()
	releasing, muxConns = len(c.releasing), len(c.muxConns)
	c.mu.Unlock()
	c.waker.mu.Lock()
	waitedKeys = len(c.waker.waiters)
	c.waker.mu.Unlock()
	return releasing, waitedKeys, muxConns
}
