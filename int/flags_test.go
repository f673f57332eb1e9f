package int_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// Every leader election setting README shows or allows starts both replicas of a pair: one
// leads, the other stays up as its standby, and neither exits: a shortened Lease alone must not
// be refused over the defaults of flags not set (--standby-warm-after, and the renew deadline
// client-go requires below the lease duration). Each setting runs a pair of its own on one hub, with its own Lease (a shard of
// its own: the Lease name is the only thing the shard flags change here).
func TestLeaderElectionSettingsRunBothReplicas(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	f := startOwnFleet(t, ctx, 0)
	kc := controllerKubeconfig(t, ctx, f)
	settings := []struct {
		name  string
		flags []string
		// what the replicas run with, as they log it
		lease, renew, retry, warm string
	}{
		{"defaults", nil, "15s", "10s", "2s", "8s"},
		{"lease 8s", []string{"--leader-elect-lease-duration=8s"}, "8s", "5.333s", "1.067s", "4.267s"},
		{"lease 4s", []string{"--leader-elect-lease-duration=4s"}, "4s", "2.667s", "533ms", "2.133s"},
		{"lease 4s renew 3s retry 1s", []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"}, "4s", "3s", "1s", "3s"},
	}
	for i, s := range settings {
		// One after the other: a parallel subtest waits for a free slot among
		// the suite's parallel tests, which can outlast the context.
		t.Run(s.name, func(t *testing.T) {
			flags := append([]string{"--leader-elect", "--leader-elect-namespace", "hub-node-metadata",
				"--shard-count", fmt.Sprint(len(settings)), "--shard-index", fmt.Sprint(i)}, s.flags...)
			pair := []*runningReplica{startReplica(t, kc, flags), startReplica(t, kc, flags)}
			j := waitLeader(t, func() {
				for _, r := range pair {
					r.mustRun(t)
				}
			}, pair[0].p, pair[1].p)
			leader, standby := pair[j], pair[1-j]

			// Both stay up, the leader keeps the Lease and renews it, for a Lease duration
			// and then some retry periods: a standby that took over, or a replica that
			// exited, fails it.
			leaseName := (fleet.Options{ShardCount: len(settings), ShardIndex: i}).LeaderElectionID()
			lease := func() *coordinationv1.Lease {
				l := &coordinationv1.Lease{}
				if err := f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: "hub-node-metadata", Name: leaseName}, l); err != nil {
					t.Fatalf("Lease %s: %v", leaseName, err)
				}
				return l
			}
			first := lease()
			if first.Spec.HolderIdentity == nil || *first.Spec.HolderIdentity == "" {
				t.Fatalf("Lease %s has no holder", leaseName)
			}
			if want, _ := time.ParseDuration(s.lease); first.Spec.LeaseDurationSeconds == nil || time.Duration(*first.Spec.LeaseDurationSeconds)*time.Second != want.Truncate(time.Second) {
				t.Errorf("Lease %s: leaseDurationSeconds %v, want %s", leaseName, first.Spec.LeaseDurationSeconds, s.lease)
			}
			lease0, _ := time.ParseDuration(s.lease)
			retry, _ := time.ParseDuration(s.retry)
			watch := lease0 + 3*retry
			renewed := false
			for end := time.Now().Add(watch); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
				for _, r := range pair {
					r.mustRun(t)
					r.mustBeHealthy(t)
				}
				if !isLeader(leader.p) || isLeader(standby.p) {
					t.Fatalf("leader %v, standby %v: want the first leader to keep leading", isLeader(leader.p), isLeader(standby.p))
				}
				l := lease()
				if *l.Spec.HolderIdentity != *first.Spec.HolderIdentity {
					t.Fatalf("the Lease went from %s to %s", *first.Spec.HolderIdentity, *l.Spec.HolderIdentity)
				}
				renewed = renewed || l.Spec.RenewTime != nil && first.Spec.RenewTime != nil && l.Spec.RenewTime.After(first.Spec.RenewTime.Time)
			}
			if !renewed {
				t.Errorf("the leader did not renew the Lease within %s", watch)
			}
			want := fmt.Sprintf(`"leaseDuration":%q,"renewDeadline":%q,"retryPeriod":%q,"standbyWarmAfter":%q`, s.lease, s.renew, s.retry, s.warm)
			for _, r := range pair {
				if !strings.Contains(r.p.Logs(), want) {
					t.Errorf("pid %d does not log %s", r.p.cmd.Process.Pid, want)
				}
			}
		})
	}
}

// runningReplica is a controller process whose exit the test sees as it happens, with
// /healthz served.
type runningReplica struct {
	p       *controllerProcess
	healthz string
	exited  chan error
}

func startReplica(t *testing.T, kubeconfig string, flags []string) *runningReplica {
	t.Helper()
	port := freePort(t)
	r := &runningReplica{healthz: fmt.Sprintf("http://127.0.0.1:%d/healthz", port), exited: make(chan error, 1)}
	r.p = startBinary(t, kubeconfig, append(append([]string{}, flags...), "--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", port))...)
	go func() { r.exited <- r.p.cmd.Wait() }()
	// Before startBinary's cleanup (cleanups run last first), which then finds it gone.
	t.Cleanup(func() {
		_ = r.p.cmd.Process.Kill()
		if err := <-r.exited; err != nil {
			t.Logf("replica stopped: %v", err) // killed: "signal: killed"
		}
	})
	return r
}

// mustRun fails the test if the process has exited.
func (r *runningReplica) mustRun(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.exited:
		r.exited <- err // for the cleanup
		t.Fatalf("pid %d exited (%v):\n%s", r.p.cmd.Process.Pid, err, tail(r.p.Logs(), 20))
	default:
	}
}

func (r *runningReplica) mustBeHealthy(t *testing.T) {
	t.Helper()
	resp, err := http.Get(r.healthz)
	if err != nil {
		t.Fatalf("pid %d: /healthz: %v", r.p.cmd.Process.Pid, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pid %d: /healthz answered %s", r.p.cmd.Process.Pid, resp.Status)
	}
}
