package pool

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// WithTLS connects to the master over TLS and verifies its certificate
// with cfg: its RootCAs (nil: the system's roots), its client certificate
// for masters that require one (tls-auth-clients), and its ServerName
// (empty: the host of the master's address). Verification is skipped only
// when cfg sets InsecureSkipVerify — the caller's explicit choice, never a
// default. A nil cfg means the defaults; a rediss:// URL turns TLS on the
// same way. TLSFiles builds cfg from PEM files.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		o.useTLS = true
		o.tlsConfig = cfg
	}
}

// TLSFiles returns a TLS configuration for WithTLS from PEM files: caFile
// is the CA bundle the master's certificate must chain to ("" for the
// system's roots); certFile and keyFile are a client certificate and its
// key (both or neither); serverName is the name the master's certificate
// must carry ("" for the host of its address). TLS 1.2 is the minimum.
func TLSFiles(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("pool: TLS CA bundle: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("pool: TLS CA bundle %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = roots
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("pool: TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("pool: TLS client certificate: give both the certificate and its key, or neither")
	}
	return cfg, nil
}

// guardedDial returns the dial function of a pool's connections: TCP,
// then the TLS handshake when useTLS (bounded by the dial's context, as
// the TCP connect is), then the guard around what carries the clear text.
func guardedDial(useTLS bool, cfg *tls.Config, l Limits) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tcp := c
		if useTLS {
			var tc *tls.Config
			if cfg != nil {
				tc = cfg.Clone()
			} else {
				tc = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			if tc.ServerName == "" {
				host, _, err := net.SplitHostPort(addr)
				if err != nil {
					c.Close()
					return nil, err
				}
				tc.ServerName = host
			}
			conn := tls.Client(c, tc)
			if err := conn.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			c = conn
		}
		return guardOver(c, tcp, l), nil
	}
}
