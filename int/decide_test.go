package int_test

import (
	"context"
	"strings"
	"testing"
	"time"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// On one fleet state, the drift report, a dry-run controller's statuses and
// the live controller's writes agree pool by pool: they share one decision
// (fleet.Decide) and one planner.
func TestDriftDryRunAndControllerAgree(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 3)
	hub := f.Hub.Client
	drifted, mixed, paused := f.Spokes()[0], f.Spokes()[1], f.Spokes()[2]
	for _, s := range f.Spokes() {
		addInfraPool(t, ctx, s, 2)
	}
	// drifted: a pool change on fresh objects (every object drifts).
	if _, err := drifted.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/agree"] = "1" }); err != nil {
		t.Fatal(err)
	}
	// mixed: one pool refused (a reserved key), one being deleted (held by a finalizer).
	if _, err := mixed.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["kubernetes.io/reserved"] = "x" }); err != nil {
		t.Fatal(err)
	}
	gpu, err := mixed.AddPool(ctx, localfleet.NewMachinePool(mixed.Name, mixed.Name, "gpu").WithReplicas(1).WithLabels(map[string]string{"example.com/gpu": "yes"}))
	if err != nil {
		t.Fatal(err)
	}
	gpu.Finalizers = []string{"example.com/hold"}
	if err := hub.Update(ctx, gpu); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx) // the test's context is done when cleanups run
		mp := &hivev1.MachinePool{}
		if hub.Get(ctx, client.ObjectKeyFromObject(gpu), mp) == nil {
			mp.Finalizers = nil
			_ = hub.Update(ctx, mp)
		}
	})
	if err := hub.Delete(ctx, gpu); err != nil {
		t.Fatal(err)
	}
	// paused: the pool carries the pause annotation.
	mp := &hivev1.MachinePool{}
	if err := hub.Get(ctx, types.NamespacedName{Namespace: paused.Name, Name: paused.Name + "-infra"}, mp); err != nil {
		t.Fatal(err)
	}
	mp.Annotations = map[string]string{nmsync.AnnotationPaused: "true"}
	if err := hub.Update(ctx, mp); err != nil {
		t.Fatal(err)
	}

	rows, err := fleet.DriftReport(ctx, hub, hub, shardOptions(t), 4)
	if err != nil {
		t.Fatal(err)
	}
	byPool := map[string]fleet.DriftRow{}
	for _, r := range rows {
		byPool[r.Pool] = r
		t.Logf("drift: %s %s %s drifted %d+%d", r.Pool, r.State, r.Reason, r.DriftedMachines, r.DriftedNodes)
	}
	want := map[string]string{
		drifted.Name + "-infra": v1alpha1.PhaseDrifted,
		mixed.Name + "-infra":   v1alpha1.PhaseRefused,
		mixed.Name + "-gpu":     v1alpha1.PhasePaused, // PoolDeleting: not planned
		paused.Name + "-infra":  v1alpha1.PhasePaused,
	}
	for pool, phase := range want {
		if byPool[pool].State != phase {
			t.Errorf("drift report: %s is %q, want %s", pool, byPool[pool].State, phase)
		}
	}

	// A dry-run controller's statuses say the same.
	dryCtx, stopDry := context.WithCancel(ctx)
	opts := testOptions()
	opts.DryRun = true
	startController(t, dryCtx, controllerConfig(t, ctx, f), opts)
	for pool, row := range byPool {
		ns, _, _ := strings.Cut(row.Cluster, "/")
		waitFor(t, "", 30*time.Second, func() bool {
			st := &v1alpha1.MachinePoolSync{}
			return hub.Get(ctx, types.NamespacedName{Namespace: ns, Name: pool}, st) == nil && st.Status.Phase != ""
		})
		st := &v1alpha1.MachinePoolSync{}
		if err := hub.Get(ctx, types.NamespacedName{Namespace: ns, Name: pool}, st); err != nil {
			t.Fatal(err)
		}
		reason := st.Status.Reason
		if reason == "DryRun" {
			reason = ""
		}
		if st.Status.Phase != row.State || reason != row.Reason || st.Status.Drifted != row.DriftedMachines+row.DriftedNodes {
			t.Errorf("%s: dry run says %s/%s drifted %d; drift report %s/%s drifted %d",
				pool, st.Status.Phase, st.Status.Reason, st.Status.Drifted, row.State, row.Reason, row.DriftedMachines+row.DriftedNodes)
		}
	}
	stopDry()
	time.Sleep(2 * time.Second)

	// The live controller writes exactly what the report said had drifted.
	offsets := map[string]int{}
	for _, s := range f.Spokes() {
		offsets[s.Name] = auditLines(t, s)
	}
	startInSync(t, ctx, f, testOptions(), drifted)
	time.Sleep(2 * time.Second)
	for _, s := range f.Spokes() {
		want := 0
		for _, r := range rows {
			if r.Cluster == s.Key().String() {
				want += r.DriftedMachines + r.DriftedNodes
			}
		}
		all, _, _ := hubPatches(t, s, offsets[s.Name])
		if all != want {
			t.Errorf("%s: the controller sent %d patches, the drift report planned %d", s.Name, all, want)
		}
	}
}
