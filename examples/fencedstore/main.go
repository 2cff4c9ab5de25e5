// Command fencedstore is a tiny storage service that rejects writers with
// stale fencing tokens, and a replay of Martin Kleppmann's scenario
// against it: a lock holder that is paused past its lock's validity wakes
// up and writes, believing it still holds the lock.
//
//	go run ./examples/fencedstore            # the scenario, on throwaway local masters
//	go run ./examples/fencedstore -serve 127.0.0.1:8080   # only the store
//
// With REDLOCK_MASTERS set (comma-separated addresses or redis:// URLs)
// the scenario uses those masters.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/masters"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func main() {
	log.SetFlags(0)
	serve := flag.String("serve", "", "only serve the store on this address (e.g. 127.0.0.1:8080)")
	flag.Parse()
	if *serve != "" {
		log.Printf("fencedstore: serving on http://%s", *serve)
		log.Fatal(http.ListenAndServe(*serve, NewStore().Handler()))
	}
	if err := scenarioThrowaway(); err != nil {
		log.Fatal(err)
	}
}

// scenarioThrowaway runs the scenario on $REDLOCK_MASTERS, or on three
// throwaway masters stopped before it returns.
func scenarioThrowaway() error {
	addrs := masters.FromEnv()
	if len(addrs) == 0 {
		var stop func()
		var err error
		fmt.Println("starting 3 throwaway redis-server masters on 127.0.0.1 ...")
		if addrs, stop, err = redistest.Launch(3); err != nil {
			return fmt.Errorf("%w\n(install Redis with: apt-get install -y redis-server)", err)
		}
		defer stop()
	}
	return scenario(context.Background(), os.Stdout, addrs)
}

// scenario replays Kleppmann's pause against a store served on a local
// port, writing what happens to out. It returns an error if the store
// accepted the stale write or lost the fresh one.
func scenario(ctx context.Context, out io.Writer, masters []string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: NewStore().Handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln) // http.ErrServerClosed, after Shutdown
	}()
	defer func() {
		_ = srv.Shutdown(context.Background())
		<-served
	}()
	url := "http://" + ln.Addr().String() + "/files/report"
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()

	// Two clients, as two processes would have.
	c1, err := redigo.NewFromAddrs(masters)
	if err != nil {
		return err
	}
	defer c1.Close()
	c2, err := redigo.NewFromAddrs(masters)
	if err != nil {
		return err
	}
	defer c2.Close()

	const ttl = time.Second
	l1, err := c1.Acquire(ctx, "report", redlock.WithTTL(ttl), redlock.WithFencing())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "client 1: acquired the lock, fencing token %d, valid for %v\n", l1.Fence(), time.Until(l1.Until()).Round(time.Millisecond))
	pause := time.Until(l1.Until()) + 200*time.Millisecond
	fmt.Fprintf(out, "client 1: stops for %v (a GC pause, a swapped-out page, a slow network)\n", pause.Round(time.Millisecond))
	time.Sleep(pause)

	fmt.Fprintln(out, "          meanwhile the lock expires on the masters")
	l2, err := c2.Acquire(ctx, "report", redlock.WithTTL(10*time.Second), redlock.WithFencing())
	if err != nil {
		return err
	}
	defer func() { _ = l2.Release(context.WithoutCancel(ctx)) }() // else it expires at its TTL
	fmt.Fprintf(out, "client 2: acquired the lock, fencing token %d\n", l2.Fence())
	code, body, err := put(ctx, hc, url, l2.Fence(), "written by client 2")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "client 2: PUT with token %d -> %d %s\n", l2.Fence(), code, http.StatusText(code))

	fmt.Fprintln(out, "client 1: wakes up, still believing it holds the lock, and writes")
	code1, body1, err := put(ctx, hc, url, l1.Fence(), "written by client 1")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "client 1: PUT with token %d -> %d %s: %s\n", l1.Fence(), code1, http.StatusText(code1), strings.TrimSpace(body1))

	content, err := get(ctx, hc, url)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "the store holds: %q\n", content)
	switch {
	case code != http.StatusNoContent:
		return fmt.Errorf("client 2's write was refused: %d %s", code, body)
	case code1 != http.StatusConflict:
		return fmt.Errorf("client 1's stale write was not refused: %d", code1)
	case content != "written by client 2":
		return errors.New("client 2's data did not survive")
	}
	return nil
}

func put(ctx context.Context, hc *http.Client, url string, token uint64, content string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader([]byte(content)))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set(TokenHeader, strconv.FormatUint(token, 10))
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func get(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
