// Package int_test holds the integration suites: every test runs against
// real kube-apiservers started by internal/localfleet (build them with
// hack/controlplane.sh; the Makefile sets KUBEBUILDER_ASSETS).
package int_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// controlPlaneGOGC and controlPlaneGOMAXPROCS are the Go runtime settings of
// every test fleet's etcd and API servers, which are most of the integration
// tests' CPU: at GOGC 400 an API server starts on about 15 % less of it, and at
// GOMAXPROCS 1 the tests' control planes take about a fifth less in all
// (docs/tests.md).
const (
	controlPlaneGOGC       = "400"
	controlPlaneGOMAXPROCS = 1
)

// testContext is the test's context, t.Context(), with a deadline: done when
// the timeout passes or the test ends, before its cleanups run (a cleanup
// that needs a context takes context.WithoutCancel of it).
func testContext(t *testing.T, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// startFleet starts n spokes with audit logs on the shared hub (sharedHub),
// stopped at cleanup. The test's clusters are in a shard of their own, and
// every controller it starts (startController, startBinary) runs as that
// shard, so it never sees another test's clusters (one that creates a
// ClusterDeployment of its own names it with nameInShard, and one that
// installs a webhook or a policy on the hub scopes it to its namespaces; the
// drift report reads that shard alone, shardFlags). A test that restarts or
// audits the hub, holds Leases of its own names or installs hub manifests
// starts its own hub: startOwnFleet.
func startFleet(t *testing.T, ctx context.Context, n int) *localfleet.Fleet {
	t.Helper()
	return startFleetWith(t, ctx, n, nil)
}

// startFleetWith is startFleet with spoke options of the test's own (mutate
// may be nil); what concerns the hub is the shared hub's.
func startFleetWith(t *testing.T, ctx context.Context, n int, mutate func(*localfleet.Options)) *localfleet.Fleet {
	t.Helper()
	hub := sharedHub(t)
	shard := claimShard(t)
	opts := localfleet.Options{Spokes: n, Audit: true, Dir: t.TempDir()}
	if mutate != nil {
		mutate(&opts)
	}
	opts.SpokeNames = func(name string) bool { return inShard(name, name, shard) }
	start := time.Now()
	f, err := hub.Part(ctx, opts)
	if err != nil {
		t.Fatalf("start %d spokes on the shared hub: %v", n, err)
	}
	t.Logf("local fleet: %d spokes on the shared hub up in %s (shard %d of %d)", n, time.Since(start).Round(time.Millisecond), shard, sharedShards)
	stopAtCleanup(t, f)
	return f
}

// startOwnFleet starts a hub of the test's own and n spokes with audit logs,
// stopped at cleanup.
func startOwnFleet(t *testing.T, ctx context.Context, n int) *localfleet.Fleet {
	t.Helper()
	return startOwnFleetWith(t, ctx, n, nil)
}

// The shared hub: most tests need a few spokes and, of the hub, only their
// own clusters' objects; a hub and an etcd of their own for every test were
// about a fifth of the tests' CPU (docs/tests.md), so they share one, started by the first such
// test and stopped by TestMain. Each test's clusters take one of
// sharedShards shards, never reused in a run: a Lease or a queue that a
// stopped test's controller leaves behind is no other test's.
const sharedShards = 4096

var shared struct {
	once  sync.Once
	fleet *localfleet.Fleet
	err   error

	mu     sync.Mutex
	shards map[string]int // by test name
	next   int
}

// sharedHub returns the shared hub, started on first use.
func sharedHub(t *testing.T) *localfleet.Fleet {
	t.Helper()
	shared.once.Do(func() {
		opts := localfleet.Options{ControlPlaneGOGC: controlPlaneGOGC, ControlPlaneGOMAXPROCS: controlPlaneGOMAXPROCS}
		if os.Getenv("LOCALFLEET_LOG") != "" {
			opts.Log = os.Stderr
		}
		shared.fleet, shared.err = localfleet.Start(context.Background(), opts)
	})
	if shared.err != nil {
		t.Fatalf("start the shared hub: %v", shared.err)
	}
	return shared.fleet
}

// stopSharedHub stops the shared hub, if a test started it.
func stopSharedHub() error {
	if shared.fleet == nil {
		return nil
	}
	return shared.fleet.Stop()
}

// claimShard gives the test a shard of the shared hub of its own (the same
// one if it asks again).
func claimShard(t *testing.T) int {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if i, ok := shared.shards[t.Name()]; ok {
		return i
	}
	if shared.shards == nil {
		shared.shards = map[string]int{}
	}
	if shared.next >= sharedShards {
		t.Fatalf("more than %d tests on the shared hub", sharedShards)
	}
	shared.shards[t.Name()] = shared.next
	shared.next++
	return shared.shards[t.Name()]
}

// inShard says whether the cluster namespace/name is in shard of the shared
// hub: a test that creates a ClusterDeployment of its own names it so.
func inShard(namespace, name string, shard int) bool {
	return fleet.Shard(namespace, name, sharedShards) == shard
}

// nameInShard is the first of prefix-1, prefix-2, ... that puts a cluster
// in namespace in the test's shard of the shared hub.
func nameInShard(t *testing.T, namespace, prefix string) string {
	t.Helper()
	shard, ok := testShard(t)
	if !ok {
		t.Fatal("nameInShard: the test has no fleet on the shared hub")
	}
	for i := 1; ; i++ {
		if name := fmt.Sprintf("%s-%d", prefix, i); inShard(namespace, name, shard) {
			return name
		}
	}
}

// shardOptions are the fleet.Options shard fields that keep a controller or
// the drift report to the test's clusters on the shared hub; zero for a test
// on a hub of its own.
func shardOptions(t *testing.T) fleet.Options {
	if shard, ok := testShard(t); ok {
		return fleet.Options{ShardCount: sharedShards, ShardIndex: shard}
	}
	return fleet.Options{}
}

// testShard is the shard of the shared hub that t, or the test t is a
// subtest of, claimed; false if it has none (its fleet is its own).
func testShard(t *testing.T) (int, bool) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for name := t.Name(); ; {
		if i, ok := shared.shards[name]; ok {
			return i, true
		}
		j := strings.LastIndex(name, "/")
		if j < 0 {
			return 0, false
		}
		name = name[:j]
	}
}

// startOwnFleetWith is startOwnFleet with options of the test's own (mutate
// may be nil).
func startOwnFleetWith(t *testing.T, ctx context.Context, n int, mutate func(*localfleet.Options)) *localfleet.Fleet {
	t.Helper()
	opts := localfleet.Options{Spokes: n, Audit: true, Dir: t.TempDir(), ControlPlaneGOGC: controlPlaneGOGC, ControlPlaneGOMAXPROCS: controlPlaneGOMAXPROCS}
	if mutate != nil {
		mutate(&opts)
	}
	if os.Getenv("LOCALFLEET_LOG") != "" {
		opts.Log = os.Stderr
	}
	start := time.Now()
	f, err := localfleet.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start local fleet: %v", err)
	}
	t.Logf("local fleet: hub + %d spokes up in %s", n, time.Since(start).Round(time.Millisecond))
	stopAtCleanup(t, f)
	return f
}

// stopAtCleanup stops f when the test ends, once its spokes' audit logs show
// only the requests the hub's credential may send.
func stopAtCleanup(t *testing.T, f *localfleet.Fleet) {
	t.Cleanup(func() {
		// Whatever the test did, the hub's credential sent each spoke only
		// the requests the allow-list permits.
		for _, s := range f.Spokes() {
			assertAllowedAudit(t, s)
		}
		if err := f.Stop(); err != nil {
			t.Errorf("stop fleet: %v", err)
		}
	})
}

// pollInterval is how often waitFor tries its condition.
const pollInterval = 100 * time.Millisecond

// poll is int/'s one poller: it calls cond every interval until cond holds,
// timeout passes or ctx is done, and returns how long it waited and whether
// cond held. Its last try may come up to an interval after the timeout. A
// wait that must not stop the test (in a goroutine, or one whose misses are
// counted) calls it; the others call waitFor.
func poll(ctx context.Context, interval, timeout time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout || ctx.Err() != nil {
			return time.Since(start), false
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
	return time.Since(start), true
}

// waitFor polls cond every pollInterval and stops the test if it does not
// hold within timeout. It returns how long cond took to hold, and logs it
// under what ("" logs nothing). It waits on the test's own goroutine, not in
// a cleanup (t.Context() is done by then).
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	d, ok := poll(t.Context(), pollInterval, timeout, cond)
	if !ok {
		if what == "" {
			what = "condition"
		}
		t.Fatalf("%s: not within %s", what, timeout)
	}
	if what != "" {
		t.Logf("%s: %s", what, d.Round(time.Millisecond))
	}
	return d
}
