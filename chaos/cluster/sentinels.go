package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/faultproxy"
	"github.com/redlock/redlock/internal/redistest"
)

// Sentinels is a [Cluster] whose masters are each a primary, one replica
// and a Sentinel watching them (local redis-server processes, no
// persistence, no proxy). A master's address is its
// redis+sentinel://SENTINEL?master_name=mI URL: clients follow Sentinel to
// the current primary. The replica replicates through a fault-injecting
// proxy: CutReplica, KillPrimary and Failover stage the failover to a
// replica that lacks a write.
//
// Kill, Start, Pause and Resume act on both data processes of a master.
// There is no proxy, so Partition is not supported and Heal has nothing to
// undo.
type Sentinels struct {
	sets []*sentinelSet

	closed  atomic.Bool
	closeMu sync.Mutex // serialises Close
}

// sentinelSet is one master: its two data servers, which of them is the
// primary now, and its Sentinel.
type sentinelSet struct {
	mu       sync.Mutex // serialises its faults; guards primary
	name     string
	data     [2]*redistest.Server
	primary  int // index in data of the current primary
	sentinel *redistest.Server
	link     *faultproxy.Proxy // the replica's replication link to the first primary
}

var _ Cluster = (*Sentinels)(nil)

// NewSentinels starts opts.N primaries, a replica of each and a Sentinel
// for each, and returns once every Sentinel knows its replica.
// opts.Persistence and opts.Image are not supported. The caller must Close
// it.
func NewSentinels(opts Options) (*Sentinels, error) {
	switch {
	case opts.N < 1:
		return nil, fmt.Errorf("cluster: Options.N is %d, want at least 1", opts.N)
	case opts.Persistence:
		return nil, errors.New("cluster: Sentinel-managed masters run without persistence")
	}
	s := &Sentinels{}
	errs := make([]error, opts.N)
	s.sets = make([]*sentinelSet, opts.N)
	var wg sync.WaitGroup
	for i := range opts.N {
		wg.Go(func() { s.sets[i], errs[i] = startSentinelSet(fmt.Sprintf("m%d", i)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

func startSentinelSet(name string) (*sentinelSet, error) {
	set := &sentinelSet{name: name}
	var err error
	if set.data[0], err = redistest.StartServer(redistest.Options{}); err != nil {
		return set, fmt.Errorf("cluster: primary of %s: %w", name, err)
	}
	if set.link, err = faultproxy.New(set.data[0].Addr()); err != nil {
		return set, fmt.Errorf("cluster: replication link of %s: %w", name, err)
	}
	host, port, _ := net.SplitHostPort(set.link.Addr())
	if set.data[1], err = redistest.StartServer(redistest.Options{Args: []string{"--replicaof", host, port}}); err != nil {
		return set, fmt.Errorf("cluster: replica of %s: %w", name, err)
	}
	if set.sentinel, err = redistest.StartServer(redistest.Options{Sentinel: map[string]string{name: set.data[0].Addr()}}); err != nil {
		return set, fmt.Errorf("cluster: Sentinel of %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := redistest.WaitReplicaKnown(ctx, set.sentinel.Addr(), name); err != nil {
		return set, fmt.Errorf("cluster: %w", err)
	}
	return set, nil
}

// Addrs returns each master's redis+sentinel:// URL.
func (s *Sentinels) Addrs() []string {
	addrs := make([]string, len(s.sets))
	for i, set := range s.sets {
		addrs[i] = "redis+sentinel://" + set.sentinel.Addr() + "?master_name=" + set.name
	}
	return addrs
}

// Primary returns the address of master i's current primary.
func (s *Sentinels) Primary(i int) (string, error) {
	var addr string
	err := s.do(i, "primary", func(set *sentinelSet) error {
		addr = set.data[set.primary].Addr()
		return nil
	})
	return addr, err
}

// do runs op on master i under its lock.
func (s *Sentinels) do(i int, what string, op func(*sentinelSet) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if i < 0 || i >= len(s.sets) {
		return fmt.Errorf("cluster: %s: master %d out of range [0, %d)", what, i, len(s.sets))
	}
	set := s.sets[i]
	set.mu.Lock()
	defer set.mu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	if err := op(set); err != nil {
		return fmt.Errorf("cluster: %s master %d (%s): %w", what, i, set.name, err)
	}
	return nil
}

// both runs op on both data servers of master i.
func (s *Sentinels) both(i int, what string, op func(*redistest.Server) error) error {
	return s.do(i, what, func(set *sentinelSet) error { return errors.Join(op(set.data[0]), op(set.data[1])) })
}

// Kill sends SIGKILL to master i's primary and replica.
func (s *Sentinels) Kill(i int) error { return s.both(i, "kill", kill) }

// Start starts master i's killed data servers again, empty.
func (s *Sentinels) Start(i int) error { return s.both(i, "start", start) }

// Restart kills master i's data servers and starts them again, empty.
func (s *Sentinels) Restart(i int, _ bool) error {
	return errors.Join(s.Kill(i), s.Start(i))
}

// Pause stops master i's data servers with SIGSTOP.
func (s *Sentinels) Pause(i int) error { return s.both(i, "pause", (*redistest.Server).Pause) }

// Resume continues master i's paused data servers.
func (s *Sentinels) Resume(i int) error {
	return s.both(i, "resume", func(sv *redistest.Server) error {
		if !sv.Paused() {
			return nil
		}
		return sv.Resume()
	})
}

// Partition returns ErrNoPartition.
func (s *Sentinels) Partition(int) error { return ErrNoPartition }

// Heal does nothing: a Sentinels master is never partitioned.
func (s *Sentinels) Heal(i int) error {
	return s.do(i, "heal", func(*sentinelSet) error { return nil })
}

// CutReplica cuts master i's replication link (its proxy drops every
// byte): writes to the primary no longer reach the replica, which still
// answers its clients and the Sentinel. Only before a failover.
func (s *Sentinels) CutReplica(i int) error {
	return s.do(i, "cut the replication link of", func(set *sentinelSet) error {
		if set.primary != 0 {
			return errors.New("it failed over already")
		}
		set.link.Blackhole()
		return nil
	})
}

// KillPrimary sends SIGKILL to master i's primary.
func (s *Sentinels) KillPrimary(i int) error {
	return s.do(i, "kill the primary of", func(set *sentinelSet) error { return kill(set.data[set.primary]) })
}

// Failover has the Sentinel fail master i over to its replica (SENTINEL
// FAILOVER) and returns once the Sentinel names it the primary.
func (s *Sentinels) Failover(ctx context.Context, i int) error {
	return s.do(i, "fail over", func(set *sentinelSet) error {
		replica := set.data[1-set.primary]
		sc := redis.NewSentinelClient(&redis.Options{Addr: set.sentinel.Addr(), MaxRetries: -1})
		defer sc.Close()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var err error
		for started := false; ; {
			if !started { // once: a second one would fail back
				err = sc.Failover(ctx, set.name).Err()
				started = err == nil
			}
			a, aerr := sc.GetMasterAddrByName(ctx, set.name).Result()
			if aerr == nil && net.JoinHostPort(a[0], a[1]) == replica.Addr() {
				set.primary = 1 - set.primary
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("the Sentinel did not promote %s: %w (last: %v, %v)", replica.Addr(), ctx.Err(), err, aerr)
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// Close stops every server. It is idempotent.
func (s *Sentinels) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, set := range s.sets {
		if set == nil {
			continue
		}
		set.mu.Lock()
		if set.link != nil {
			errs = append(errs, set.link.Close())
		}
		for _, sv := range append(set.data[:], set.sentinel) {
			if sv != nil {
				errs = append(errs, sv.Stop())
			}
		}
		set.mu.Unlock()
	}
	return errors.Join(errs...)
}
