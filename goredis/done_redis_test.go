package goredis

import (
	"testing"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// Done of a client over go-redis clients, made by New or by
// redlock.NewWithTransports of this package's transports, is not nil and
// is closed by Close; a second Close succeeds.
func TestClient_doneClosesAtClose(t *testing.T) {
	ms := startMasters(t, 3)
	made := map[string]func() (*redlock.Client, error){
		"New": func() (*redlock.Client, error) { return New(ms.clients) },
		"NewWithTransports": func() (*redlock.Client, error) {
			ts := make([]transport.Transport, len(ms.clients))
			for i, c := range ms.clients {
				ts[i] = NewTransport(c)
			}
			return redlock.NewWithTransports(ts)
		},
	}
	for name, mk := range made {
		t.Run(name, func(t *testing.T) {
			c, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			d := c.Done()
			if d == nil {
				t.Fatal("Done is nil")
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			select {
			case <-d:
			default:
				t.Fatal("Done not closed after Close")
			}
		})
	}
}
