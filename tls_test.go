package redlock

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// tlsMasters starts n TLS-only masters with throwaway certificates and
// returns them and a client configuration they accept.
func tlsMasters(t *testing.T, n int) (*redistest.Cluster, *tls.Config) {
	t.Helper()
	files, err := redistest.GenerateTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	conf, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return redistest.StartT(t, n, redistest.Options{TLS: files}), conf
}

// tlsNodes returns a Node per address over TLS with conf.
func tlsNodes(t *testing.T, addrs []string, conf *tls.Config) []Node {
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, TLSConfig: conf, MaxRetries: -1, DialerRetries: 1,
			DialTimeout: time.Second, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return nodesOf(t, cs)
}

// TestTLSMasters: lock, fence, extend and unlock through TLS; a client that
// does not trust the masters' CA gets a NodeError per master, naming it and
// the certificate problem, within the node timeout; so does a rediss:// URL
// (it trusts the system's CAs only), until its options get the CA.
func TestTLSMasters(t *testing.T) {
	c, conf := tlsMasters(t, 3)
	ctx := context.Background()

	// A TLS handshake on a loaded machine can take longer than the default
	// 100ms node timeout.
	r := newRedlock(t, tlsNodes(t, c.Addrs(), conf), WithFencing(), WithNodeTimeout(time.Second))
	l, err := r.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatalf("TryLock over TLS: %v", err)
	}
	if l.Fence() == 0 {
		t.Error("no fence token over TLS")
	}
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend over TLS: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock over TLS: %v", err)
	}

	otherFiles, err := redistest.GenerateTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wrongCA, err := otherFiles.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	urls := make([]string, 3)
	for i, a := range c.Addrs() {
		urls[i] = "rediss://" + a
	}
	fromURLs, err := NewFromURLs(urls, WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fromURLs.Close() })
	for name, r := range map[string]*Redlock{
		"wrong CA":            newRedlock(t, tlsNodes(t, c.Addrs(), wrongCA), WithNodeTimeout(500*time.Millisecond)),
		"rediss:// system CA": fromURLs,
	} {
		start := time.Now()
		_, err := r.TryLock(ctx, testKey(t))
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: TryLock took %v", name, took)
		}
		var qe *QuorumError
		if !errors.As(err, &qe) || qe.Failed < qe.Quorum-1 || qe.Succeeded != 0 {
			t.Fatalf("%s: err %v, want a QuorumError with the masters failed", name, err)
		}
		for _, e := range qe.Errs {
			var ne *NodeError
			if !errors.As(e, &ne) || !strings.Contains(c.Addrs()[0]+c.Addrs()[1]+c.Addrs()[2], strings.TrimSuffix(ne.Node, "/0")) ||
				!strings.Contains(e.Error(), "certificate") {
				t.Errorf("%s: per-master error %v: want a NodeError naming the master and the certificate problem", name, e)
			}
		}
	}

	// rediss:// with the CA added to its options works.
	nodes := make([]Node, 3)
	for i, u := range urls {
		o, err := ParseMasterURL(u)
		if err != nil {
			t.Fatal(err)
		}
		if o.TLSConfig == nil {
			t.Fatalf("ParseMasterURL(%s) has no TLS config", u)
		}
		o.TLSConfig.RootCAs, o.TLSConfig.Certificates = conf.RootCAs, conf.Certificates
		cl := redis.NewClient(o)
		t.Cleanup(func() { cl.Close() })
		nodes[i] = NewNode(cl)
	}
	l, err = newRedlock(t, nodes, WithNodeTimeout(time.Second)).TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatalf("TryLock over rediss:// with the CA: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTLSWakeups: wake-ups reach a waiting Redlock over TLS masters too
// (its subscriptions use the client's TLS configuration).
func TestTLSWakeups(t *testing.T) {
	c, conf := tlsMasters(t, 3)
	ctx := context.Background()
	holder := newRedlock(t, tlsNodes(t, c.Addrs(), conf), WithNodeTimeout(time.Second))
	waiter := newRedlock(t, tlsNodes(t, c.Addrs(), conf), WithNodeTimeout(time.Second))
	l, err := holder.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if d := handOff(t, l, waiter, 200*time.Millisecond); d > 500*time.Millisecond {
		t.Errorf("the waiter took the key %v after the release over TLS; its backoff was at least 1s, a wake-up takes a round trip", d)
	}
}
