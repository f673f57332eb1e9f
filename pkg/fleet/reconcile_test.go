package fleet

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/pkg/remote"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// outcome is what one reconcile did, as a person or a test reads it.
type outcome struct {
	Phase, Reason           string
	Total, Synced, Drifted  int
	Patched, Skipped        int
	SpokePatches            int
	StatusWrites            int
	Events                  []string
	Err                     bool
	Ensured                 bool
	State                   string
	RequeueSoonerThanResync bool
}

func (w *world) outcome(t *testing.T, res time.Duration, err error) outcome {
	t.Helper()
	st := w.poolSync(t).Status
	w.r.Metrics.mu.Lock()
	state := w.r.Metrics.states[w.key().String()]
	w.r.Metrics.mu.Unlock()
	o := outcome{
		Phase: st.Phase, Reason: st.Reason, Total: st.Total, Synced: st.Synced, Drifted: st.Drifted,
		Patched: st.Patched, Skipped: st.Skipped, SpokePatches: w.spoke.patchCount(),
		StatusWrites: w.takeStatusWrites(), Events: w.takeEvents(), Err: err != nil, Ensured: w.spokes.ensured.take() > 0,
		State: state, RequeueSoonerThanResync: err == nil && res > 0 && res < w.r.Opts.ResyncPeriod*9/10,
	}
	return o
}

// TestReconcile table-tests one reconcile of a cluster with one pool of 3
// Machines and Nodes, from each starting point a fleet meets.
func TestReconcile(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "node-c-workers-a-1",
		errors.New(`admission webhook "deny.example.com" denied the request`))
	tests := map[string]struct {
		opts   Options
		mutate func(cd *hivev1.ClusterDeployment, mp *hivev1.MachinePool, spoke []client.Object)
		down   *remote.Status // the spoke's connection, when it is not connected
		fail   func(obj client.Object) error
		want   outcome
	}{
		"drifted: every Machine and Node patched once": {
			want: outcome{Phase: v1alpha1.PhaseInSync, Total: 6, Synced: 6, Patched: 6, SpokePatches: 6, StatusWrites: 2,
				Events: []string{EventApplied}, Ensured: true, State: StateInSync},
		},
		"holding the pool's label without the record of it: adopted, one write each": {
			mutate: func(_ *hivev1.ClusterDeployment, _ *hivev1.MachinePool, objs []client.Object) {
				for _, o := range objs[1:] {
					setLabel(o, labelKey, "a")
				}
			},
			want: outcome{Phase: v1alpha1.PhaseInSync, Total: 6, Synced: 6, Patched: 6, SpokePatches: 6, StatusWrites: 2,
				Events: []string{EventApplied}, Ensured: true, State: StateInSync},
		},
		"cluster paused: the spoke is not even connected": {
			mutate: func(cd *hivev1.ClusterDeployment, _ *hivev1.MachinePool, _ []client.Object) {
				cd.Annotations = map[string]string{nmsync.AnnotationPaused: "true"}
			},
			want: outcome{Phase: v1alpha1.PhasePaused, Reason: "ClusterPaused", StatusWrites: 2, State: StatePaused},
		},
		"pool paused": {
			mutate: func(_ *hivev1.ClusterDeployment, mp *hivev1.MachinePool, _ []client.Object) {
				mp.Annotations = map[string]string{nmsync.AnnotationPaused: "true"}
			},
			want: outcome{Phase: v1alpha1.PhasePaused, Reason: "PoolPaused", StatusWrites: 2, Ensured: true, State: StateInSync},
		},
		"cluster hibernating: disconnected, reported ineligible": {
			mutate: func(cd *hivev1.ClusterDeployment, _ *hivev1.MachinePool, _ []client.Object) {
				cd.Spec.PowerState = hivev1.ClusterPowerStateHibernating
			},
			want: outcome{Phase: v1alpha1.PhaseUnreachable, Reason: string(remote.ReasonHibernating), StatusWrites: 2, Ensured: true, State: StateIneligible},
		},
		"spoke refuses the credentials": {
			down: &remote.Status{Reason: remote.ReasonUnauthorized, Message: "401"},
			want: outcome{Phase: v1alpha1.PhaseUnreachable, Reason: string(remote.ReasonUnauthorized), StatusWrites: 2,
				Events: []string{EventDisconnected}, Ensured: true, State: StateUnreachable},
		},
		"spoke still connecting: no status yet, the connect brings it back": {
			down: &remote.Status{Reason: remote.ReasonConnecting},
			want: outcome{Ensured: true, State: StateUnreachable},
		},
		"pool refused: nothing written to the spoke": {
			mutate: func(_ *hivev1.ClusterDeployment, mp *hivev1.MachinePool, _ []client.Object) {
				mp.Spec.Taints = []corev1.Taint{{Key: "k", Effect: "Sometimes"}}
			},
			want: outcome{Phase: v1alpha1.PhaseRefused, Reason: "InvalidEffect", StatusWrites: 2,
				Events: []string{EventRefused}, Ensured: true, State: StateRefused},
		},
		"one Node write fails: the rest written, retried soon (the sync made progress)": {
			fail: func(obj client.Object) error {
				if obj.GetName() == "node-c-workers-a-1" {
					return apierrors.NewInternalError(errors.New("etcd leader changed"))
				}
				return nil
			},
			want: outcome{Phase: v1alpha1.PhaseDrifted, Reason: "WriteFailed", Total: 6, Synced: 5, Drifted: 1, Patched: 5, SpokePatches: 6, StatusWrites: 2,
				Events: []string{EventApplied, EventSyncFailed}, Ensured: true, State: StateDrifting, RequeueSoonerThanResync: true},
		},
		"one Node write denied by a webhook: held, reported, the rest written": {
			fail: func(obj client.Object) error {
				if obj.GetName() == "node-c-workers-a-1" {
					return forbidden
				}
				return nil
			},
			want: outcome{Phase: v1alpha1.PhaseDrifted, Reason: "WriteDenied", Total: 6, Synced: 5, Drifted: 1, Patched: 5, SpokePatches: 6, StatusWrites: 2,
				Events: []string{EventApplied, EventDenied}, Ensured: true, State: StateDrifting, RequeueSoonerThanResync: true},
		},
		"dry run: drift reported, nothing written to the spoke": {
			opts: Options{DryRun: true},
			want: outcome{Phase: v1alpha1.PhaseDrifted, Reason: "DryRun", Total: 6, Drifted: 6, StatusWrites: 2,
				Events: []string{EventWouldApply}, Ensured: true, State: StateDrifting},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			mutate := tc.mutate
			if mutate == nil {
				mutate = func(*hivev1.ClusterDeployment, *hivev1.MachinePool, []client.Object) {}
			}
			w := newWorld(t, 3, tc.opts, mutate)
			if tc.down != nil {
				w.spokes.down[w.key()] = *tc.down
			}
			w.spoke.failPatch = tc.fail
			res, err := w.reconcile(t)
			got := w.outcome(t, res.RequeueAfter, err)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reconcile (-want +got):\n%s", diff)
			}
		})
	}
}

// A second reconcile of an unchanged cluster writes nothing anywhere and
// says nothing, whatever the first one found.
func TestReconcileAgainWritesNothing(t *testing.T) {
	for name, down := range map[string]*remote.Status{
		"connected":    nil,
		"unauthorized": {Reason: remote.ReasonUnauthorized, Message: "401"},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, 3, Options{}, func(*hivev1.ClusterDeployment, *hivev1.MachinePool, []client.Object) {})
			if down != nil {
				w.spokes.down[w.key()] = *down
			}
			if _, err := w.reconcile(t); err != nil {
				t.Fatal(err)
			}
			first := w.outcome(t, 0, nil)
			patches := first.SpokePatches
			res, err := w.reconcile(t)
			again := w.outcome(t, res.RequeueAfter, err)
			if again.SpokePatches != patches || again.StatusWrites != 0 || len(again.Events) != 0 || again.Err {
				t.Errorf("second reconcile wrote or said something: spoke patches %d -> %d, status writes %d, events %v, err %v",
					patches, again.SpokePatches, again.StatusWrites, again.Events, err)
			}
			if again.Phase != first.Phase {
				t.Errorf("phase %s -> %s", first.Phase, again.Phase)
			}
			if res.RequeueAfter < w.r.Opts.ResyncPeriod*9/10 || res.RequeueAfter > w.r.Opts.ResyncPeriod*11/10 {
				t.Errorf("requeue after %s, want the resync period %s ±10%%", res.RequeueAfter, w.r.Opts.ResyncPeriod)
			}
		})
	}
}

// Another writer that undoes the pool on a Machine after every write is
// fought ContestedThreshold times, then left alone and reported: the status
// says Contested and names the Machine, and nothing more is written to it.
func TestReconcileContested(t *testing.T) {
	w := newWorld(t, 2, Options{ContestedThreshold: 3, ContestedWindow: time.Hour},
		func(*hivev1.ClusterDeployment, *hivev1.MachinePool, []client.Object) {})
	ctx := context.Background()
	undo := func() {
		m := &machinev1beta1.Machine{}
		if err := w.spoke.Get(ctx, client.ObjectKey{Namespace: nmsync.MachineAPINamespace, Name: "c-workers-a-0"}, m); err != nil {
			t.Fatal(err)
		}
		delete(m.Spec.Labels, labelKey)
		if err := w.spoke.Update(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	var got outcome
	for range 3 {
		res, err := w.reconcile(t)
		got = w.outcome(t, res.RequeueAfter, err)
		undo()
	}
	if !slices.Contains(got.Events, EventContested) {
		t.Fatalf("after 3 fights: events %v; want a %s Event", got.Events, EventContested)
	}
	before := w.spoke.patches["Machine/c-workers-a-0"]
	for i, want := range []outcome{
		{Phase: v1alpha1.PhaseContested, Reason: v1alpha1.ReasonContested, Total: 4, Synced: 3, Drifted: 1, StatusWrites: 1},
		{Phase: v1alpha1.PhaseContested, Reason: v1alpha1.ReasonContested, Total: 4, Synced: 3, Drifted: 1},
	} {
		res, err := w.reconcile(t)
		got = w.outcome(t, res.RequeueAfter, err)
		got.SpokePatches, got.Ensured, got.State, got.RequeueSoonerThanResync = 0, false, "", false
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("reconcile %d after the contest (-want +got):\n%s", i+1, diff)
		}
	}
	if after := w.spoke.patches["Machine/c-workers-a-0"]; after != before {
		t.Errorf("the held Machine was written again: %d -> %d patches", before, after)
	}
	if msg := w.poolSync(t).Status.Message; !strings.Contains(msg, "c-workers-a-0") {
		t.Errorf("the status does not name the contested Machine: %q", msg)
	}
	if w.nodeLabel(t, "node-c-workers-a-0", labelKey) != "a" || w.nodeLabel(t, "node-c-workers-a-1", labelKey) != "a" {
		t.Errorf("the Nodes lost the pool's label")
	}
}

// A pool whose ClusterDeployment does not exist says so in its status, once.
func TestReconcileClusterMissing(t *testing.T) {
	w := newWorld(t, 1, Options{}, func(*hivev1.ClusterDeployment, *hivev1.MachinePool, []client.Object) {})
	if err := w.hub.Delete(context.Background(), w.cd); err != nil {
		t.Fatal(err)
	}
	for i, want := range []outcome{
		{Phase: v1alpha1.PhaseUnreachable, Reason: EventClusterMissing, StatusWrites: 2, Events: []string{EventClusterMissing}},
		{Phase: v1alpha1.PhaseUnreachable, Reason: EventClusterMissing},
	} {
		res, err := w.reconcile(t)
		if diff := cmp.Diff(want, w.outcome(t, res.RequeueAfter, err)); diff != "" {
			t.Errorf("reconcile %d (-want +got):\n%s", i+1, diff)
		}
	}
	if len(w.spokes.forgotten) == 0 {
		t.Errorf("the missing cluster's connection was not forgotten")
	}
}

// A change of the pool is written at once, and the status says so.
func TestReconcilePoolChange(t *testing.T) {
	w := newWorld(t, 2, Options{}, func(*hivev1.ClusterDeployment, *hivev1.MachinePool, []client.Object) {})
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	w.outcome(t, 0, nil)
	w.setPoolLabel(t, "b")
	res, err := w.reconcile(t)
	got := w.outcome(t, res.RequeueAfter, err)
	want := outcome{Phase: v1alpha1.PhaseInSync, Total: 4, Synced: 4, Patched: 4, SpokePatches: 8, StatusWrites: 1,
		Events: []string{EventApplied}, Ensured: true, State: StateInSync}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pool change (-want +got):\n%s", diff)
	}
	if v := w.nodeLabel(t, "node-c-workers-a-1", labelKey); v != "b" {
		t.Errorf("Node label %s=%q, want b", labelKey, v)
	}
}
