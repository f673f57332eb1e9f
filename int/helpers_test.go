// Package int_test holds the integration suites: every test runs against
// real kube-apiservers started by internal/localfleet (build them with
// hack/controlplane.sh; the Makefile sets KUBEBUILDER_ASSETS).
package int_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

// controlPlaneGOGC is the GOGC of every test fleet's etcd and API servers: the
// integration tests start about 170 API servers and 50 etcds, whose starts are
// most of their CPU, and at 400 each start takes about 15 % less of it
// (docs/tests.md).
const controlPlaneGOGC = "400"

// testContext is the test's context, t.Context(), with a deadline: done when
// the timeout passes or the test ends, before its cleanups run (a cleanup
// that needs a context takes context.WithoutCancel of it).
func testContext(t *testing.T, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// startFleet starts a hub and n spokes with audit logs, stopped at cleanup.
func startFleet(t *testing.T, ctx context.Context, n int) *localfleet.Fleet {
	t.Helper()
	return startFleetWith(t, ctx, n, nil)
}

// startFleetWith is startFleet with options of the test's own (mutate may be nil).
func startFleetWith(t *testing.T, ctx context.Context, n int, mutate func(*localfleet.Options)) *localfleet.Fleet {
	t.Helper()
	opts := localfleet.Options{Spokes: n, Audit: true, Dir: t.TempDir(), ControlPlaneGOGC: controlPlaneGOGC}
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
	return f
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
