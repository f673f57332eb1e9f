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

// eventually polls cond every 100ms until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
