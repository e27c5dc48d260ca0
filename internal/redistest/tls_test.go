package redistest

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// tlsClient returns a go-redis client for addr over TLS with conf, closed at
// the end of the test.
func tlsClient(t *testing.T, addr string, conf *tls.Config) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: conf, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTLS: a TLS server starts (the probe speaks TLS), answers a client
// that trusts its CA and presents a certificate, and refuses plain TCP, a
// client that trusts another CA, and one without a certificate.
func TestTLS(t *testing.T) {
	files, err := GenerateTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := GenerateTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, Options{TLS: files})
	good, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	wrongCA, err := other.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	noCert := good.Clone()
	noCert.Certificates = nil

	ctx := context.Background()
	if err := tlsClient(t, s.Addr(), good).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
	for name, c := range map[string]*redis.Client{
		"plain TCP":             newClient(t, s.Addr()),
		"wrong CA":              tlsClient(t, s.Addr(), wrongCA),
		"no client certificate": tlsClient(t, s.Addr(), noCert),
	} {
		if err := c.Ping(ctx).Err(); err == nil {
			t.Errorf("%s: PING succeeded", name)
		}
	}

	// Restart keeps TLS, and so does the readiness probe.
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if err := tlsClient(t, s.Addr(), good).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS after Restart: %v", err)
	}

	// With tls-auth-clients optional, a client without a certificate is let in.
	files.AuthClients = "optional"
	s2 := start(t, Options{TLS: files})
	if err := tlsClient(t, s2.Addr(), noCert).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING without a client certificate, auth optional: %v", err)
	}
}
