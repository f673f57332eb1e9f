package int_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// addGuardedPool adds an infra pool of n Nodes whose NoExecute taints go 2
// Nodes at a time, interval apart.
func addGuardedPool(t *testing.T, ctx context.Context, s *localfleet.Spoke, n int, interval time.Duration) {
	t.Helper()
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "infra").
		WithReplicas(n).
		WithLabels(map[string]string{"node-role.kubernetes.io/infra": ""}).
		WithAnnotation(nmsync.AnnotationNoExecuteBatch, "2").
		WithAnnotation(nmsync.AnnotationNoExecuteInterval, interval.String())); err != nil {
		t.Fatal(err)
	}
}

// addGPUTaint makes the pool declare gpuKey=true:NoExecute.
func addGPUTaint(t *testing.T, ctx context.Context, s *localfleet.Spoke) {
	t.Helper()
	if _, err := s.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
		spec.Taints = append(spec.Taints, localfleet.Taint(gpuKey, "true", corev1.TaintEffectNoExecute))
	}); err != nil {
		t.Fatal(err)
	}
}

// firstWriteAfter is the earliest audit-logged write of the paced taint
// made after t.
func firstWriteAfter(t *testing.T, ctx context.Context, s *localfleet.Spoke, skip int, after time.Time) time.Time {
	t.Helper()
	var first time.Time
	for _, w := range pacedWrites(t, ctx, s, skip, "true") {
		if at := w.at(); !at.IsZero() && at.After(after) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// TestNoExecuteRolloutGuards runs two paced rollouts against the shipped
// binary, on two spokes at once:
//   - the health gate: after the first batch, one of its Nodes turns
//     NotReady (its Ready condition set False through the status
//     subresource); no batch follows, through a restart of the controller,
//     until it is Ready again, and the next batch follows within a second;
//   - the maintenance window: a window that opens at the start of a coming
//     minute holds the first batch until then, through the same restart.
//
// Status, Events, the pending metric and the drift report say why each waits.
func TestNoExecuteRolloutGuards(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 2)
	sick, windowed := f.Spokes()[0], f.Spokes()[1]
	const interval = 2 * time.Second
	addGuardedPool(t, ctx, sick, 6, interval)
	addGuardedPool(t, ctx, windowed, 4, time.Second)
	kc := controllerKubeconfig(t, ctx, f)
	ctrl := startBinary(t, kc)
	waitInSync(t, ctx, f, sick, time.Minute)
	waitInSync(t, ctx, f, windowed, time.Minute)
	status := func(s *localfleet.Spoke) v1alpha1.MachinePoolSyncStatus {
		st, err := poolSync(ctx, f.Hub.Client, s, "infra")
		if err != nil {
			t.Fatal(err)
		}
		return st.Status
	}

	// The window: it opens at the start of a minute at least 20 s away, for 10 minutes.
	opens := time.Now().UTC().Add(20 * time.Second).Truncate(time.Minute).Add(time.Minute)
	window := fmt.Sprintf("schedule=%d %d * * *; duration=10m; timeZone=UTC", opens.Minute(), opens.Hour())
	setPoolAnnotation(t, ctx, f.Hub.Client, windowed, "infra", nmsync.AnnotationNoExecuteWindow, window)
	windowSkip := auditLines(t, windowed)
	addGPUTaint(t, ctx, windowed)
	waitFor(t, "the windowed rollout says it waits for the window", 10*time.Second, func() bool {
		st := status(windowed)
		return st.Phase == v1alpha1.PhaseRollingOut && st.Reason == v1alpha1.ReasonOutsideWindow &&
			st.Rollout != nil && st.Rollout.NextBatchTime != nil && st.Rollout.NextBatchTime.Time.Equal(opens)
	})
	t.Logf("windowed: %s", status(windowed).Message)

	// The health gate: the first batch, then one of its Nodes NotReady.
	sickSkip := auditLines(t, sick)
	addGPUTaint(t, ctx, sick)
	waitFor(t, "the first batch", 5*time.Second, func() bool { return gpuTainted(ctx, sick, "true") == 2 })
	nodes, err := sick.Nodes(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(nodes, func(n corev1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == gpuKey })
	})
	notReady := nodes[i].Name
	if err := sick.SetNodeReady(ctx, notReady, corev1.ConditionFalse); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the status names the NotReady Node", 5*time.Second, func() bool {
		st := status(sick)
		return st.Phase == v1alpha1.PhaseRollingOut && st.Reason == v1alpha1.ReasonNodesNotReady && strings.Contains(st.Message, notReady)
	})
	t.Logf("held: %s", status(sick).Message)
	time.Sleep(2*interval + time.Second) // two batches would have been due
	if n := gpuTainted(ctx, sick, "true"); n != 2 {
		t.Fatalf("%d Nodes tainted while %s, tainted by the first batch, is NotReady; want 2", n, notReady)
	}
	m, err := ctrl.scrape()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("hub_node_metadata_noexecute_pending_nodes{cluster=%q,pool=%q,reason=\"nodes_not_ready\"} 4", sick.Key().String(), sick.Name+"-infra"),
		fmt.Sprintf("hub_node_metadata_noexecute_pending_nodes{cluster=%q,pool=%q,reason=\"outside_window\"} 4", windowed.Key().String(), windowed.Name+"-infra"),
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics lack %s; have %s", want, metricLine(m, "hub_node_metadata_noexecute_pending_nodes"))
		}
	}
	for _, s := range []*localfleet.Spoke{sick, windowed} {
		if !hasEvent(ctx, f.Hub.Client, s.Name, s.Name+"-infra", fleet.EventNoExecuteHeld) {
			t.Errorf("%s: no %s Event", s.Name, fleet.EventNoExecuteHeld)
		}
	}
	wantHeld := map[string]string{sick.Key().String(): notReady, windowed.Key().String(): opens.Format(time.RFC3339)}
	rows := driftRows(t, ctx, f)
	if len(rows) != len(wantHeld) {
		t.Errorf("drift report: %d rows, want one per pool: %+v", len(rows), rows)
	}
	for _, r := range rows {
		want, ok := wantHeld[r.Cluster]
		if !ok || r.PendingNoExecute == "" || !strings.Contains(r.PendingHeld, want) {
			t.Errorf("drift row %s: pending %q, held %q; want it to say %s", r.Cluster, r.PendingNoExecute, r.PendingHeld, want)
		}
	}

	// A restart inside both held rollouts holds them still.
	kill(t, ctrl)
	startBinary(t, kc)
	time.Sleep(interval + 3*time.Second) // the restarted controller waits an interval, then would batch
	if n := gpuTainted(ctx, sick, "true"); n != 2 {
		t.Errorf("after a restart, %d Nodes tainted while %s is NotReady; want 2", n, notReady)
	}
	if st := status(sick); st.Reason != v1alpha1.ReasonNodesNotReady {
		t.Errorf("after a restart the status says %s: %s", st.Reason, st.Message)
	}

	// Ready again: the next batch within a second.
	ready := time.Now() // just before: the write cannot come earlier
	if err := sick.SetNodeReady(ctx, notReady, corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the next batch", 5*time.Second, func() bool { return gpuTainted(ctx, sick, "true") >= 4 })
	next := firstWriteAfter(t, ctx, sick, sickSkip, ready)
	if resumed := next.Sub(ready); next.IsZero() || resumed > time.Second {
		t.Errorf("the next batch's first write at %s, %s after the Node was set Ready; want one within a second", next.Format(time.RFC3339Nano), resumed)
	} else {
		t.Logf("the next batch came %s after the Node was set Ready", resumed)
	}
	waitFor(t, "the whole pool", 4*interval+5*time.Second, func() bool { return gpuTainted(ctx, sick, "true") == 6 })
	waitInSync(t, ctx, f, sick, 10*time.Second)

	// The window opens: the first batch then, not before.
	if n := gpuTainted(ctx, windowed, "true"); n != 0 && time.Now().Before(opens) {
		t.Errorf("%d Nodes tainted before the window opens", n)
	}
	waitFor(t, "the first batch once the window opens", time.Until(opens)+5*time.Second, func() bool { return gpuTainted(ctx, windowed, "true") >= 2 })
	first := firstWriteAfter(t, ctx, windowed, windowSkip, time.Time{})
	if first.Before(opens) || first.Sub(opens) > 2*time.Second {
		t.Errorf("the windowed rollout's first batch at %s, want just after %s", first.Format(time.RFC3339Nano), opens.Format(time.RFC3339))
	} else {
		t.Logf("the windowed rollout's first batch %s after the window opened", first.Sub(opens).Round(time.Millisecond))
	}
	waitInSync(t, ctx, f, windowed, 10*time.Second)
}
