package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock"
	"github.com/redlock/redlock/chaos/cluster"
	"github.com/redlock/redlock/internal/redistest"
)

// env is one scenario's world: the masters, the recorder, the resource,
// and the workload's clients.
type env struct {
	cl      cluster.Cluster
	n       int // masters
	quorum  int
	ttl     time.Duration
	fencing bool
	rw      bool // the workload's keys are RWMutexes: readers and writers (scenario.rw)
	permits int  // the workload's keys are Semaphores of this many permits (scenario.permits); 0: not

	adapter     string        // Config.Adapter: the contenders' clients
	restartGate time.Duration // the clients' WithRestartGate; 0: off
	confirm     bool          // the clients take locks WithReplicaConfirm(1)
	companions  bool          // the leak check counts the keys' companions too (scenario.companions)
	end         time.Time     // the workload runs until then, or until the script is done if later
	keys        []string
	rec         *recorder
	res         *resource
	trig        *trigger      // nil unless the scenario acquires through a trigger
	procs       *procs        // nil unless the workload is client processes
	hold        time.Duration // a critical section lasts hold/2 to 3/2 hold
	soak        int           // the workload runs until this many acquisitions, if more than 0

	// gate lets a script quiet the workload: every client iteration holds
	// it for reading; a script that takes it for writing waits for the
	// iterations in flight and holds back new ones.
	gate sync.RWMutex

	mu      sync.Mutex // guards faulted, clients and nextID
	faulted []bool     // masters touched by a fault in this run
	clients []*client
	nextID  int // the next client's id
}

// lockOpts are the options of every client's Redlock.
func (e *env) lockOpts() []redlock.Option {
	opts := []redlock.Option{redlock.WithTTL(e.ttl)}
	if e.fencing {
		opts = append(opts, redlock.WithFencing())
	}
	if e.restartGate > 0 {
		opts = append(opts, redlock.WithRestartGate(e.restartGate))
	}
	if e.confirm {
		opts = append(opts, redlock.WithReplicaConfirm(1))
	}
	return opts
}

// newClient makes a client with the scenario's options, its masters'
// Nodes wrapped by wrap when it is not nil; closeClients closes it. Its
// adapter is the run's, alternating by client id when mixed: workload
// clients, extending clients and scripted holders alike.
func (e *env) newClient(wrap func(int, redlock.Node) redlock.Node) (*client, error) {
	e.mu.Lock()
	id := e.nextID
	e.nextID++
	e.mu.Unlock()
	c, err := newClient(id, adapterOf(e.adapter, id), e.cl.Addrs(), wrap, e.lockOpts()...)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.clients = append(e.clients, c)
	e.mu.Unlock()
	return c, nil
}

func (e *env) closeClients() error {
	e.mu.Lock()
	cs := e.clients
	e.clients = nil
	e.mu.Unlock()
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.close())
	}
	return errors.Join(errs...)
}

// work is one workload client's loop until stop closes: acquire a random
// key (Lock, retrying for up to a TTL), write twice with a short hold in
// between, release. A call in progress when stop closes runs to its end:
// cancelling it would leave keys that its rollback cannot be sure to
// remove (see the report's LEAKED column), and that would be the harness's
// doing. ctx ends the loop at once (Ctrl-C).
func (e *env) work(ctx context.Context, stop <-chan struct{}, c *client) {
	for !stopped(ctx, stop) {
		e.gate.RLock()
		key := e.keys[rand.IntN(len(e.keys))]
		if e.permits > 0 {
			// A permit: it holds beside up to permits-1 others, and writes
			// nothing (recorded as sharing, Read; CheckPermits counts).
			if h := e.acquireAs(ctx, c, key, e.ttl, true); h != nil {
				time.Sleep(e.hold/2 + rand.N(e.hold))
				e.release(h)
			}
		} else if e.rw && rand.IntN(3) != 0 {
			// A reader: it holds beside other readers, and writes nothing.
			if h := e.acquireAs(ctx, c, key, e.ttl, true); h != nil {
				time.Sleep(e.hold/2 + rand.N(e.hold))
				e.release(h)
			}
		} else if h := e.acquire(ctx, c, key, e.ttl); h != nil {
			e.write(h)
			time.Sleep(e.hold/2 + rand.N(e.hold))
			e.write(h)
			e.release(h)
		}
		e.gate.RUnlock()
		time.Sleep(rand.N(5 * time.Millisecond))
	}
}

// minority is the largest set of masters whose loss leaves a quorum: the
// last (N-1)/2.
func (e *env) minority() []int { return e.last((e.n - 1) / 2) }

// majority is the last N/2+1 masters.
func (e *env) majority() []int { return e.last(e.quorum) }

func (e *env) last(k int) []int {
	var s []int
	for i := e.n - k; i < e.n; i++ {
		s = append(s, i)
	}
	return s
}

// each runs op on every master in nodes at once.
func (e *env) each(nodes []int, op func(int) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for k, i := range nodes {
		wg.Go(func() { errs[k] = op(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// inject applies a fault to nodes and records it as in force from when it
// is done.
func (e *env) inject(kind string, nodes []int, note string, op func(int) error) (int, error) {
	e.mu.Lock()
	for _, i := range nodes {
		e.faulted[i] = true
	}
	e.mu.Unlock()
	began := e.rec.now()
	if err := e.each(nodes, op); err != nil {
		return 0, fmt.Errorf("%s %v: %w", kind, nodes, err)
	}
	return e.rec.faultInjected(kind, nodes, note, began), nil
}

// undo records the end of fault f and applies op to its masters.
func (e *env) undo(f int, nodes []int, what string, op func(int) error) error {
	e.rec.faultEnd(f)
	if err := e.each(nodes, op); err != nil {
		return fmt.Errorf("%s %v: %w", what, nodes, err)
	}
	return nil
}

// restore brings every master back: resumed, healed, running.
func (e *env) restore() error {
	all := e.last(e.n)
	return errors.Join(
		e.each(all, e.cl.Resume),
		e.each(all, e.cl.Heal),
		e.each(all, e.cl.Start),
	)
}

// leaked lists the lock keys left on the masters that no fault touched,
// once every holder has released, each with the time it still had to live:
// a lock that nobody holds and that blocks its key until it expires. A key
// found on a shard of a Redis Cluster master that does not serve its slot
// (an orphan a slot move left behind) is listed too. With e.companions it
// also lists the companions of the keys: every hand-off queue, and every
// fence counter found on a shard that does not serve its slot (on the one
// that does, a counter is kept by design: it never expires).
func (e *env) leaked(ctx context.Context) ([]string, error) {
	e.mu.Lock()
	faulted := slices.Clone(e.faulted)
	e.mu.Unlock()
	var out []string
	for i, master := range e.cl.Addrs() {
		if faulted[i] {
			continue
		}
		for _, addr := range servers(master) {
			keys, err := leakedOn(ctx, addr, e.companions)
			for _, k := range keys {
				switch {
				case k.orphan:
					out = append(out, fmt.Sprintf("master %d: %s on %s, a shard that does not serve its slot (an orphan of a slot move)", i, k.key, addr))
				case k.companion != "":
					out = append(out, fmt.Sprintf("master %d: %s, a %s (expires in %v; %s)", i, k.key, k.companion, k.ttl, k.value))
				default:
					out = append(out, fmt.Sprintf("master %d: %s (expires in %v; %s)", i, k.key, k.ttl, e.whose(k.value)))
				}
			}
			if err != nil {
				return out, fmt.Errorf("master %d (%s): list keys: %w", i, addr, err)
			}
		}
	}
	return out, nil
}

// servers returns the redis-server addresses of a master: itself, each
// shard of a Redis Cluster master, or a Sentinel-managed master's primary
// (none when its Sentinel does not answer).
func servers(master string) []string {
	if shards, ok := cluster.ShardAddrs(master); ok {
		return shards
	}
	if m, err := redlock.ParseMaster(master); err == nil && m.Sentinel != nil {
		// The primary the Sentinel names now.
		sc := redis.NewSentinelClient(&redis.Options{Addr: m.Sentinel.SentinelAddrs[0], MaxRetries: 2})
		defer sc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if a, err := sc.GetMasterAddrByName(ctx, m.Sentinel.MasterName).Result(); err == nil {
			return []string{net.JoinHostPort(a[0], a[1])}
		}
		return nil
	}
	return []string{master}
}

// leakedKey is a key left on a server: a lock, with its value, or one of
// its companions.
type leakedKey struct {
	key, value string
	ttl        time.Duration
	companion  string // "fence counter" or "hand-off queue"; "" for a lock
	orphan     bool   // on a shard that does not serve its slot: it replied MOVED
}

// Kinds of companion key (leakedKey.companion).
const (
	companionFence = "fence counter"
	companionQueue = "hand-off queue"
)

// leakedOn lists the lock keys on the redis-server at addr, and with
// companions their companions as [env.leaked] says.
func leakedOn(ctx context.Context, addr string, companions bool) ([]leakedKey, error) {
	r := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
	defer r.Close()
	// A companion of a key without a hash tag (fence:{KEY}, waiters:{KEY})
	// does not match keyPrefix*; one of a tagged key does.
	pattern := keyPrefix + "*"
	if companions {
		pattern = "*" + keyPrefix + "*"
	}
	keys, err := r.Keys(ctx, pattern).Result()
	var out []leakedKey
	for _, k := range keys {
		if err != nil {
			break
		}
		if strings.Contains(k, warmInfix) {
			continue // the warm-up's, before the scenario's clock (warmUp)
		}
		companion := companionOf(k)
		if companion != "" && !companions {
			continue // fence counters and queues of waiting Redlocks are not locks
		}
		var ttl time.Duration
		ttl, err = r.PTTL(ctx, k).Result()
		if redis.HasErrorPrefix(err, "MOVED") {
			out = append(out, leakedKey{key: k, companion: companion, orphan: true})
			err = nil
			continue
		}
		if err != nil || ttl == -2 || companion == companionFence {
			// Gone meanwhile (PTTL -2); or a counter on its slot's shard,
			// which is kept: it never expires.
			continue
		}
		var v string
		if companion == companionQueue {
			var n int64
			n, err = r.ZCard(ctx, k).Result()
			v = fmt.Sprintf("%d entries", n)
		} else {
			v, err = lockValue(ctx, r, k)
		}
		out = append(out, leakedKey{key: k, value: v, ttl: ttl, companion: companion})
	}
	return out, err
}

// companionOf says which companion of a lock key k is by its name
// ([redlock.FenceKey], [redlock.WaitKey]), "" for none.
func companionOf(k string) string {
	switch {
	case strings.HasSuffix(k, ":fence") || strings.HasPrefix(k, "fence:{"):
		return companionFence
	case strings.HasSuffix(k, ":waiters") || strings.HasPrefix(k, "waiters:{"):
		return companionQueue
	}
	return ""
}

// lockValue reads a lock key: a plain lock's value, or the hold values of an
// owned one (redlock exec holds its lock as an owner), space-separated.
func lockValue(ctx context.Context, r *redis.Client, k string) (string, error) {
	if typ, err := r.Type(ctx, k).Result(); err != nil || typ != "hash" {
		v, err := r.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			err = nil // expired meanwhile
		}
		return v, err
	}
	m, err := r.HGetAll(ctx, k).Result()
	var holds []string
	for f := range m {
		if f != "owner" && f != "fence" {
			holds = append(holds, f)
		}
	}
	slices.Sort(holds)
	return strings.Join(holds, " "), err
}

// whose says which recorded holder a lock value belongs to.
func (e *env) whose(value string) string {
	for _, a := range e.rec.history().Acquires {
		if a.OK && a.Value == value {
			return fmt.Sprintf("holder #%d, released at %v, valid until %v", a.ID, a.Released, a.Until)
		}
	}
	return "no holder: a failed attempt's"
}

// reset empties every master (lock keys and fence counters) for the next
// scenario on the same cluster. The masters must be running and reachable.
func reset(ctx context.Context, cl cluster.Cluster) error {
	var errs []error
	for i, master := range cl.Addrs() {
		for _, addr := range servers(master) {
			r := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: 2, DisableIdentity: true})
			if err := r.FlushAll(ctx).Err(); err != nil {
				errs = append(errs, fmt.Errorf("master %d (%s): FLUSHALL: %w", i, addr, err))
			}
			r.Close()
		}
	}
	return errors.Join(errs...)
}

// upFor waits until every master has been up for d (INFO's
// uptime_in_seconds), so that a restart gate of d lets them vote.
func upFor(ctx context.Context, cl cluster.Cluster, d time.Duration) error {
	for i, master := range cl.Addrs() {
		for _, addr := range servers(master) {
			if err := redistest.WaitUp(ctx, addr, d); err != nil {
				return fmt.Errorf("master %d: %w", i, err)
			}
		}
	}
	return nil
}

// keyPrefix starts every key the workload locks.
const keyPrefix = "chaos-key-"

// sleep waits d or until ctx ends, and reports whether the whole d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// left is the time until the workload's planned end; while a soak has not
// reached its acquisitions, an hour at least.
func (e *env) left() time.Duration {
	if e.soak > 0 && e.rec.acquisitions() < e.soak {
		return max(time.Until(e.end), time.Hour)
	}
	return time.Until(e.end)
}

// stopped reports whether a client loop must end: stop is closed (the
// scenario is over) or ctx ended (Ctrl-C).
func stopped(ctx context.Context, stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	case <-ctx.Done():
		return true
	default:
		return false
	}
}
