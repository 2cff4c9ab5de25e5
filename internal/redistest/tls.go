package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are a throwaway certificate authority and certificates signed by
// it, as PEM files in a test's temporary directory: a server certificate
// for 127.0.0.1 and localhost (good for client authentication too), and a
// second, unrelated CA for testing a wrong one.
type Certs struct {
	CAFile      string
	CertFile    string // the server's (and a client's) certificate
	KeyFile     string
	OtherCAFile string // a CA that signed nothing here
}

// NewCerts makes Certs valid for an hour.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	c := &Certs{
		CAFile:      filepath.Join(dir, "ca.pem"),
		CertFile:    filepath.Join(dir, "cert.pem"),
		KeyFile:     filepath.Join(dir, "key.pem"),
		OtherCAFile: filepath.Join(dir, "other-ca.pem"),
	}
	caKey, caCert, caDER := newCA(t, "quorumlock test CA")
	writePEM(t, c.CAFile, "CERTIFICATE", caDER)
	_, _, otherDER := newCA(t, "unrelated test CA")
	writePEM(t, c.OtherCAFile, "CERTIFICATE", otherDER)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, c.CertFile, "CERTIFICATE", der)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, c.KeyFile, "EC PRIVATE KEY", kb)
	return c
}

func newCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// WithTLS serves TLS only (no plain port) with c's server certificate;
// clientAuth makes the server require a client certificate signed by c's
// CA. The server's Do and readiness check speak TLS then.
func WithTLS(c *Certs, clientAuth bool) Option {
	auth := "no"
	if clientAuth {
		auth = "yes"
	}
	return func(args *[]string) {
		*args = append(*args, "--port", "0", "--tls-port", portPlaceholder,
			"--tls-cert-file", c.CertFile, "--tls-key-file", c.KeyFile,
			"--tls-ca-cert-file", c.CAFile, "--tls-auth-clients", auth)
	}
}

// portPlaceholder in an option's arguments becomes the server's port.
const portPlaceholder = "{port}"

// tlsConfig returns the configuration the server's own checks dial with,
// or nil for a plain server.
func tlsConfigFor(args []string) *tls.Config {
	var ca, cert, key string
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--tls-ca-cert-file":
			ca = args[i+1]
		case "--tls-cert-file":
			cert = args[i+1]
		case "--tls-key-file":
			key = args[i+1]
		}
	}
	if ca == "" {
		return nil
	}
	pemBytes, err := os.ReadFile(ca)
	if err != nil {
		return nil
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemBytes)
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if pair, err := tls.LoadX509KeyPair(cert, key); err == nil {
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}
