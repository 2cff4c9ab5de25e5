package pool_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

func ping(p *pool.RedisPool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := p.GetContext(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = redis.DoContext(c, ctx, "PING")
	return err
}

func tlsFiles(t *testing.T, ca, cert, key, name string) *tls.Config {
	t.Helper()
	cfg, err := pool.TLSFiles(ca, cert, key, name)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func tlsPool(t *testing.T, addr string, cfg *tls.Config) *pool.RedisPool {
	t.Helper()
	// A generous connect timeout: these tests are about what the handshake
	// decides, and loading the system's roots on a loaded machine can take
	// longer than the default second.
	p, err := pool.New(addr, pool.WithTLS(cfg), pool.WithConnectTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestTLS_verifiesTheMaster(t *testing.T) {
	certs := redistest.NewCerts(t)
	srv := redistest.StartOne(t, redistest.WithTLS(certs, false))

	good := tlsPool(t, srv.Addr(), tlsFiles(t, certs.CAFile, "", "", ""))
	if err := ping(good); err != nil {
		t.Fatalf("right CA: %v", err)
	}
	if got := good.String(); got != "rediss://"+srv.Addr()+"/0" {
		t.Errorf("String() = %q", got)
	}

	// A wrong CA fails, and says why.
	wrong := tlsPool(t, srv.Addr(), tlsFiles(t, certs.OtherCAFile, "", "", ""))
	err := ping(wrong)
	var unknown x509.UnknownAuthorityError
	var dialErr *pool.DialError
	if !errors.As(err, &unknown) || !errors.As(err, &dialErr) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("wrong CA: err = %v, want an unknown-authority DialError", err)
	}
	if !strings.Contains(err.Error(), srv.Addr()) {
		t.Errorf("the error does not name the master: %v", err)
	}

	// The system's roots do not know the test CA either.
	if err := ping(tlsPool(t, srv.Addr(), nil)); !errors.As(err, &unknown) {
		t.Fatalf("system roots: err = %v", err)
	}

	// A name the certificate does not carry fails.
	var host x509.HostnameError
	if err := ping(tlsPool(t, srv.Addr(), tlsFiles(t, certs.CAFile, "", "", "redis.example.com"))); !errors.As(err, &host) {
		t.Fatalf("wrong server name: err = %v", err)
	}

	// A rediss:// URL with the CA given as an option.
	cfg, err := pool.TLSFiles(certs.CAFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	u, err := pool.NewFromURL("rediss://"+srv.Addr(), pool.WithTLS(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := ping(u); err != nil {
		t.Fatalf("rediss:// URL: %v", err)
	}
}

func TestTLS_clientCertificate(t *testing.T) {
	certs := redistest.NewCerts(t)
	srv := redistest.StartOne(t, redistest.WithTLS(certs, true))
	if err := ping(tlsPool(t, srv.Addr(), tlsFiles(t, certs.CAFile, "", "", ""))); err == nil {
		t.Fatal("a master that requires a client certificate accepted none")
	}
	if err := ping(tlsPool(t, srv.Addr(), tlsFiles(t, certs.CAFile, certs.CertFile, certs.KeyFile, ""))); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
}

func TestTLSFiles_badInput(t *testing.T) {
	certs := redistest.NewCerts(t)
	for name, f := range map[string]func() error{
		"missing CA file": func() error { _, err := pool.TLSFiles("/nonexistent/ca.pem", "", "", ""); return err },
		"CA file without a certificate": func() error {
			_, err := pool.TLSFiles(certs.KeyFile, "", "", "") // a PEM key, not a certificate
			if err != nil && !strings.Contains(err.Error(), "no PEM certificate") {
				return nil // the wrong failure: report it as none
			}
			return err
		},
		"cert without key": func() error {
			_, err := pool.TLSFiles(certs.CAFile, certs.CertFile, "", "")
			return err
		},
		"key is not the cert's": func() error {
			_, err := pool.TLSFiles(certs.CAFile, certs.CertFile, certs.CAFile, "")
			return err
		},
	} {
		if err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A TLS master that never answers the handshake: the dial ends with the
// caller's context, not after the pool's connect timeout.
func TestTLS_handshakeHonoursCtx(t *testing.T) {
	addr := hostile.Silent(t)
	p, err := pool.New(addr, pool.WithTLS(nil), pool.WithConnectTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = p.GetContext(ctx)
	el := time.Since(start)
	var de *pool.DialError
	if !errors.As(err, &de) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a DialError matching context.DeadlineExceeded", err)
	}
	if el > 2*time.Second {
		t.Errorf("the dial took %v with a 200ms context", el)
	}
}
