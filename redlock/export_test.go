package redlock

// Backoff exposes the retry delay for tests.
var Backoff = backoff
