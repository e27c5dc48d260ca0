package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// Shards is a [Cluster] whose masters are each a Redis Cluster of local
// redis-server processes (shards, no replicas, no persistence), started
// with cluster-require-full-coverage off: a shard that is down takes only
// its own slots away. A master's address is a redis+cluster:// URL that
// lists every shard ([ShardAddrs] splits it).
//
// Kill, Start, Pause and Resume act on every shard of a master; KillShard
// and StartShard on one. There is no proxy in front of the shards (a
// cluster tells its clients the shards' own addresses), so Partition is not
// supported and Heal has nothing to undo.
type Shards struct {
	masters []*redistest.RedisCluster
	mu      []sync.Mutex // per master: serialises its faults

	closed  atomic.Bool
	closeMu sync.Mutex // serialises Close
}

var _ Cluster = (*Shards)(nil)

// ErrNoPartition is returned by [Shards.Partition].
var ErrNoPartition = errors.New("cluster: a Redis Cluster master has no proxy to partition it behind")

// NewShards starts opts.N Redis Clusters of shards shards each and returns
// once every one is formed. opts.Persistence and opts.Image are not
// supported. The caller must Close it.
func NewShards(opts Options, shards int) (*Shards, error) {
	switch {
	case opts.N < 1:
		return nil, fmt.Errorf("cluster: Options.N is %d, want at least 1", opts.N)
	case shards < 1:
		return nil, fmt.Errorf("cluster: %d shards, want at least 1", shards)
	case opts.Persistence:
		return nil, errors.New("cluster: Redis Cluster masters run without persistence")
	}
	s := &Shards{masters: make([]*redistest.RedisCluster, opts.N), mu: make([]sync.Mutex, opts.N)}
	errs := make([]error, opts.N)
	var wg sync.WaitGroup
	for i := range opts.N {
		wg.Go(func() {
			s.masters[i], errs[i] = redistest.StartRedisCluster(shards,
				redistest.Options{Args: []string{"--cluster-require-full-coverage", "no"}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(fmt.Errorf("cluster: %w", err), s.Close())
	}
	return s, nil
}

// Addrs returns each master's redis+cluster:// URL, every shard in it.
func (s *Shards) Addrs() []string {
	addrs := make([]string, len(s.masters))
	for i, rc := range s.masters {
		shards := rc.Addrs()
		q := url.Values{"addr": shards[1:]}
		addrs[i] = "redis+cluster://" + shards[0] + "?" + q.Encode()
	}
	return addrs
}

// ShardAddrs returns the "host:port" of every shard of a master address
// that [Shards.Addrs] returned, and false for any other address.
func ShardAddrs(addr string) ([]string, bool) {
	rest, ok := strings.CutPrefix(addr, "redis+cluster://")
	if !ok {
		return nil, false
	}
	host, query, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, false
	}
	return append([]string{host}, q["addr"]...), true
}

// ShardOf returns the shard of master i that serves key's slot now (after
// [Shards.MoveSlot] too), as its first shard sees it (CLUSTER SHARDS).
func (s *Shards) ShardOf(ctx context.Context, i int, key string) (int, error) {
	if i < 0 || i >= len(s.masters) {
		return 0, fmt.Errorf("cluster: master %d out of range [0, %d)", i, len(s.masters))
	}
	slot, err := s.slotOf(ctx, i, key)
	if err != nil {
		return 0, err
	}
	k, err := s.masters[i].ShardOfSlot(ctx, slot)
	if err != nil {
		return 0, fmt.Errorf("cluster: which shard of master %d serves slot %d: %w", i, slot, err)
	}
	return k, nil
}

// slotOf asks master i's first shard for key's hash slot (CLUSTER KEYSLOT).
func (s *Shards) slotOf(ctx context.Context, i int, key string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: s.masters[i].Shards[0].Addr(), MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	slot, err := c.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("cluster: CLUSTER KEYSLOT on master %d: %w", i, err)
	}
	return int(slot), nil
}

// NumShards returns how many shards each master has.
func (s *Shards) NumShards() int { return len(s.masters[0].Shards) }

// MoveSlot moves key's hash slot on master i, with the slot's keys, from
// the shard that serves it to shard to, as redis-cli --cluster reshard
// does ([redistest.RedisCluster.MoveSlot]: CLUSTER SETSLOT IMPORTING and
// MIGRATING, MIGRATE, SETSLOT NODE), and returns the shard it came from.
// It does nothing when shard to serves the slot already. The slot's keys
// are never lost: while it moves, clients are sent on with ASK or told
// TRYAGAIN; after it, MOVED. Every shard of master i must be running.
func (s *Shards) MoveSlot(ctx context.Context, i int, key string, to int) (from int, err error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if i < 0 || i >= len(s.masters) {
		return 0, fmt.Errorf("cluster: move a slot: master %d out of range [0, %d)", i, len(s.masters))
	}
	if n := len(s.masters[i].Shards); to < 0 || to >= n {
		return 0, fmt.Errorf("cluster: move a slot: shard %d of master %d out of range [0, %d)", to, i, n)
	}
	s.mu[i].Lock()
	defer s.mu[i].Unlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	slot, err := s.slotOf(ctx, i, key)
	if err != nil {
		return 0, err
	}
	from, err = s.masters[i].ShardOfSlot(ctx, slot)
	if err != nil {
		return 0, fmt.Errorf("cluster: which shard of master %d serves slot %d: %w", i, slot, err)
	}
	if from == to {
		return from, nil
	}
	if err := s.masters[i].MoveSlot(ctx, slot, from, to); err != nil {
		return from, fmt.Errorf("cluster: move slot %d of master %d from shard %d to %d: %w", slot, i, from, to, err)
	}
	return from, nil
}

// shards runs op on the given shards of master i (all of them when none
// are given), under master i's lock.
func (s *Shards) shards(i int, what string, op func(*redistest.Server) error, only ...int) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if i < 0 || i >= len(s.masters) {
		return fmt.Errorf("cluster: %s: master %d out of range [0, %d)", what, i, len(s.masters))
	}
	s.mu[i].Lock()
	defer s.mu[i].Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	all := s.masters[i].Shards
	if len(only) == 0 {
		for k := range all {
			only = append(only, k)
		}
	}
	var errs []error
	for _, k := range only {
		if k < 0 || k >= len(all) {
			errs = append(errs, fmt.Errorf("cluster: %s: shard %d of master %d out of range [0, %d)", what, k, i, len(all)))
			continue
		}
		if err := op(all[k]); err != nil {
			errs = append(errs, fmt.Errorf("cluster: %s shard %d of master %d (%s): %w", what, k, i, all[k].Addr(), err))
		}
	}
	return errors.Join(errs...)
}

func kill(sv *redistest.Server) error {
	if err := sv.Kill(); err != nil && !errors.Is(err, redistest.ErrNotRunning) {
		return err
	}
	return nil
}

// start starts a killed shard again with its data directory, which keeps
// its cluster configuration (nodes.conf): it rejoins the cluster with its
// slots, and no keys. The caller waits for the cluster ([clusterOK]).
func start(sv *redistest.Server) error {
	if sv.Running() {
		return nil
	}
	return sv.Restart(true)
}

// clusterOK polls a running, unpaused shard until it reports
// cluster_state:ok, for up to 10 s.
func clusterOK(sv *redistest.Server) error {
	if !sv.Running() || sv.Paused() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: sv.Addr(), MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster state not ok: %w (last: %v)", context.Cause(ctx), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL to every shard of master i.
func (s *Shards) Kill(i int) error { return s.shards(i, "kill", kill) }

// Start starts every killed shard of master i again (empty of keys) and
// waits until the cluster is whole.
func (s *Shards) Start(i int) error {
	return errors.Join(s.shards(i, "start", start), s.shards(i, "wait for", clusterOK))
}

// KillShard sends SIGKILL to shard k of master i.
func (s *Shards) KillShard(i, k int) error { return s.shards(i, "kill", kill, k) }

// StartShard starts shard k of master i again if it was killed, and waits
// until the cluster is whole.
func (s *Shards) StartShard(i, k int) error {
	return errors.Join(s.shards(i, "start", start, k), s.shards(i, "wait for", clusterOK))
}

// PauseShard stops shard k of master i with SIGSTOP: its requests time out
// and its connections stay open, where a killed shard refuses them.
func (s *Shards) PauseShard(i, k int) error {
	return s.shards(i, "pause", (*redistest.Server).Pause, k)
}

// ResumeShard continues shard k of master i if it is paused, and waits
// until the cluster is whole.
func (s *Shards) ResumeShard(i, k int) error {
	return errors.Join(s.shards(i, "resume", resume, k), s.shards(i, "wait for", clusterOK))
}

// resume continues a paused shard; one that is not paused is left alone.
func resume(sv *redistest.Server) error {
	if !sv.Paused() {
		return nil
	}
	return sv.Resume()
}

// Restart kills every shard of master i and starts it again: empty, with
// or without keepData (there is no persistence).
func (s *Shards) Restart(i int, _ bool) error {
	return errors.Join(s.shards(i, "kill", kill), s.Start(i))
}

// Pause stops every shard of master i with SIGSTOP.
func (s *Shards) Pause(i int) error {
	return s.shards(i, "pause", (*redistest.Server).Pause)
}

// Resume continues master i's paused shards.
func (s *Shards) Resume(i int) error {
	return s.shards(i, "resume", resume)
}

// Partition returns ErrNoPartition.
func (s *Shards) Partition(i int) error { return ErrNoPartition }

// Heal does nothing: a Shards master is never partitioned.
func (s *Shards) Heal(i int) error {
	return s.shards(i, "heal", func(*redistest.Server) error { return nil })
}

// Close stops every shard. It is idempotent.
func (s *Shards) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	var errs []error
	for i, rc := range s.masters {
		if rc != nil {
			s.mu[i].Lock()
			errs = append(errs, rc.Stop())
			s.mu[i].Unlock()
		}
	}
	return errors.Join(errs...)
}
