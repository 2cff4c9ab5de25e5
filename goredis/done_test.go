package goredis

import (
	"testing"

	"github.com/quorumlock/quorumlock/redlock"
)

// Done of a client over go-redis clients, made by New or by
// redlock.NewWithTransports of this package's transports, is open until
// Close, then closed; Close may be called again, also concurrently.
func TestClient_doneClosesAtClose(t *testing.T) {
	ms := startMasters(t, 3)
	made := map[string]func() (*redlock.Client, error){
		"New": func() (*redlock.Client, error) { return New(ms.clients) },
		"NewWithTransports": func() (*redlock.Client, error) {
			ts := make([]redlock.Transport, len(ms.clients))
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
			select {
			case <-d:
				t.Fatal("Done closed before Close")
			default:
			}
			errs := make(chan error, 3)
			for i := 0; i < 3; i++ {
				go func() { errs <- c.Close() }()
			}
			for i := 0; i < 3; i++ {
				if err := <-errs; err != nil {
					t.Errorf("Close: %v", err)
				}
			}
			select {
			case <-d:
			default:
				t.Fatal("Done not closed after Close")
			}
		})
	}
}
