package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	"golang.org/x/sync/errgroup"
)

// Labels on every container and network a [Docker] cluster makes.
const (
	// Label marks everything the harness made: "redlock-chaos=1".
	Label = "redlock-chaos"
	// labelCluster names the cluster (its random id), for Close.
	labelCluster = "redlock-chaos.cluster"
	// labelOwner is "hostname/pid" of the process that made it, for Prune.
	labelOwner = "redlock-chaos.owner"
)

func ownerLabel() string {
	host, _ := os.Hostname()
	return host + "/" + strconv.Itoa(os.Getpid())
}

// Prune removes the containers and networks left behind by a cluster whose
// process died without Close: those labelled redlock-chaos=1 whose owner
// label names this host and a process that no longer runs. Live clusters,
// including those of other processes, are left alone, and so is whatever
// another host made; remove those by hand:
//
//	docker rm -f $(docker ps -aq --filter label=redlock-chaos=1)
//	docker network prune --filter label=redlock-chaos=1
func Prune(ctx context.Context) error {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return fmt.Errorf("cluster: docker: %w", err)
	}
	host, _ := os.Hostname()
	return removeLabelled(ctx, pool.Client, Label+"=1", func(labels map[string]string) bool {
		return ownerGone(labels[labelOwner], host)
	})
}

// ownerGone reports whether an owner label ("hostname/pid") names a process
// of this host that has exited. A label that does not parse counts as gone.
func ownerGone(owner, host string) bool {
	h, pidText, ok := strings.Cut(owner, "/")
	if !ok {
		return true
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return true
	}
	if h != host {
		return false
	}
	if pid == os.Getpid() {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	err = p.Signal(syscall.Signal(0))
	return err != nil && !errors.Is(err, syscall.EPERM)
}

// removeLabelled force-removes every container, then every network, that
// carries the label filter ("key=value") and passes match (nil: all).
// maxConcurrentOps bounds the engine calls made at once: enough for every
// master of a usual cluster, few enough not to flood the engine.
const maxConcurrentOps = 8

func removeLabelled(ctx context.Context, c *dc.Client, filter string, match func(map[string]string) bool) error {
	var errs []error
	containers, err := c.ListContainers(dc.ListContainersOptions{
		All:     true,
		Filters: map[string][]string{"label": {filter}},
		Context: ctx,
	})
	if err != nil {
		return fmt.Errorf("cluster: list containers: %w", err)
	}
	// Containers are removed at once (a network goes only when its
	// containers are gone); every failure is reported.
	var g errgroup.Group
	g.SetLimit(maxConcurrentOps)
	rmErrs := make([]error, len(containers))
	for i, ct := range containers {
		if match != nil && !match(ct.Labels) {
			continue
		}
		g.Go(func() error {
			err := c.RemoveContainer(dc.RemoveContainerOptions{ID: ct.ID, Force: true, RemoveVolumes: true, Context: ctx})
			var gone *dc.NoSuchContainer
			if err != nil && !errors.As(err, &gone) {
				rmErrs[i] = fmt.Errorf("cluster: remove container %s: %w", ct.ID, err)
			}
			return nil
		})
	}
	g.Wait()
	errs = append(errs, rmErrs...)
	networks, err := c.FilteredListNetworks(dc.NetworkFilterOpts{"label": {filter: true}})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("cluster: list networks: %w", err))...)
	}
	for _, nw := range networks {
		if match != nil && !match(nw.Labels) {
			continue
		}
		err := c.RemoveNetwork(nw.ID)
		var gone *dc.NoSuchNetwork
		if err != nil && !errors.As(err, &gone) {
			errs = append(errs, fmt.Errorf("cluster: remove network %s: %w", nw.Name, err))
		}
	}
	return errors.Join(errs...)
}
