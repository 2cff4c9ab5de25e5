package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Kleppmann's scenario end to end, on real masters: the paused holder's
// write is refused and the next holder's data survives.
func TestScenario_staleWriteIsRefused(t *testing.T) {
	for _, n := range []int{1, 5} {
		servers := redistest.Start(t, n)
		addrs := make([]string, n)
		for i, s := range servers {
			addrs[i] = s.Addr()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var out bytes.Buffer
		err := scenario(ctx, &out, addrs)
		cancel()
		if err != nil {
			t.Fatalf("N=%d: %v\n%s", n, err, out.String())
		}
		if !strings.Contains(out.String(), "409 Conflict") {
			t.Fatalf("N=%d: transcript lacks the refusal:\n%s", n, out.String())
		}
	}
}

func TestStore_rules(t *testing.T) {
	srv := httptest.NewServer(NewStore().Handler())
	defer srv.Close()
	hc := srv.Client()
	defer hc.CloseIdleConnections()
	do := func(method, token, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+"/files/f", strings.NewReader(body))
		if token != "" {
			req.Header.Set(TokenHeader, token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, token string
		want          int
	}{
		{"GET", "", 404},
		{"PUT", "", 400},
		{"PUT", "zero", 400},
		{"PUT", "0", 400},
		{"PUT", "-3", 400},
		{"PUT", "7", 204},
		{"PUT", "7", 204}, // the same holder writes again
		{"PUT", "6", 409},
		{"PUT", "8", 204},
		{"GET", "", 200},
	} {
		if got := do(tc.method, tc.token, "x"); got != tc.want {
			t.Errorf("%s with token %q = %d, want %d", tc.method, tc.token, got, tc.want)
		}
	}
}
