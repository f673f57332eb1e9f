package fleet

import (
	"context"
	"slices"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// statusHub returns a Reconciler on a fake hub that counts status patches in
// *patches (and reads through get, when set; its Live reader does not), and
// the pool c-infra of cluster ns/c.
func statusHub(patches *int, get func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error) (*Reconciler, *hivev1.MachinePool) {
	live := fake.NewClientBuilder().WithScheme(Scheme()).WithStatusSubresource(&v1alpha1.MachinePoolSync{}).Build()
	hub := interceptor.NewClient(live, interceptor.Funcs{
		Get: get,
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, o ...client.SubResourcePatchOption) error {
			*patches++
			return c.SubResource(sub).Patch(ctx, obj, p, o...)
		},
	})
	r := &Reconciler{Hub: hub, Live: live, Metrics: NewMetrics(prometheus.NewRegistry())}
	r.init()
	mp := &hivev1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-infra", UID: "u"},
		Spec: hivev1.MachinePoolSpec{ClusterDeploymentRef: corev1.LocalObjectReference{Name: "c"}, Name: "infra"}}
	return r, mp
}

// A MachinePoolSync is written when what it says changes, and only then: no
// heartbeat refreshes its time while the pool stays as described.
func TestWriteStatusOnlyOnChange(t *testing.T) {
	writes := 0
	r, mp := statusHub(&writes, nil)
	inSync := Status(PoolResult{Cluster: "ns/c", PoolName: "infra", Results: nil})
	inSync.Phase = v1alpha1.PhaseInSync
	t0 := metav1.NewTime(time.Unix(1000, 0))
	ctx := context.Background()

	tests := []struct {
		name      string
		st        v1alpha1.MachinePoolSyncStatus
		patched   bool
		at        metav1.Time
		wantNews  bool
		wantPatch int // patches so far (the first status is an Update)
	}{
		{"first status is created", inSync, false, t0, true, 0},
		{"the same status an hour later is not rewritten", inSync, false, metav1.NewTime(t0.Add(time.Hour)), false, 0},
		{"a sync that patched objects is news", inSync, true, metav1.NewTime(t0.Add(2 * time.Hour)), true, 1},
		{"a new phase is news", func() v1alpha1.MachinePoolSyncStatus {
			s := inSync
			s.Phase, s.Reason = v1alpha1.PhaseUnreachable, "Timeout"
			return s
		}(), false, metav1.NewTime(t0.Add(3 * time.Hour)), true, 2},
		{"and said once", func() v1alpha1.MachinePoolSyncStatus {
			s := inSync
			s.Phase, s.Reason = v1alpha1.PhaseUnreachable, "Timeout"
			return s
		}(), false, metav1.NewTime(t0.Add(4 * time.Hour)), false, 2},
	}
	for _, tc := range tests {
		news, err := r.writeStatus(ctx, mp, tc.st, tc.patched, tc.at, tc.at.Time)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if news != tc.wantNews || writes != tc.wantPatch {
			t.Errorf("%s: wrote=%v patches=%d, want wrote=%v patches=%d", tc.name, news, writes, tc.wantNews, tc.wantPatch)
		}
	}
	got := &v1alpha1.MachinePoolSync{}
	if err := r.Hub.Get(ctx, client.ObjectKeyFromObject(mp), got); err != nil {
		t.Fatal(err)
	}
	// Unreachable is not a sync: the time of the last written sync stays.
	if want := t0.Add(2 * time.Hour); got.Status.LastSyncTime == nil || !got.Status.LastSyncTime.Time.Equal(want) {
		t.Errorf("lastSyncTime = %v, want %v", got.Status.LastSyncTime, want)
	}
}

// A cache one write behind (it still shows the status before our last write)
// costs no second write of the same status.
func TestWriteStatusLaggingCache(t *testing.T) {
	var stale *v1alpha1.MachinePoolSync
	patches := 0
	r, mp := statusHub(&patches, func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if s, ok := obj.(*v1alpha1.MachinePoolSync); ok && stale != nil {
			stale.DeepCopyInto(s)
			return nil
		}
		return c.Get(ctx, key, obj, opts...)
	})
	ctx := context.Background()
	st := v1alpha1.MachinePoolSyncStatus{Cluster: "c", Pool: "infra", Phase: v1alpha1.PhaseUnreachable, Reason: "Timeout"}
	if _, err := r.writeStatus(ctx, mp, st, false, metav1.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	// The cache now shows the object as created, before its status was written.
	cached := &v1alpha1.MachinePoolSync{}
	if err := r.Hub.Get(ctx, client.ObjectKeyFromObject(mp), cached); err != nil {
		t.Fatal(err)
	}
	cached.Status, cached.ResourceVersion = v1alpha1.MachinePoolSyncStatus{}, "1"
	stale = cached
	news, err := r.writeStatus(ctx, mp, st, false, metav1.Now(), time.Now())
	if err != nil || news || patches != 0 {
		t.Errorf("same status over a lagging cache: wrote=%v patches=%d err=%v, want no write", news, patches, err)
	}
	st.Phase, st.Reason = v1alpha1.PhaseInSync, ""
	if news, err := r.writeStatus(ctx, mp, st, false, metav1.Now(), time.Now()); err != nil || !news || patches != 1 {
		t.Errorf("a new status: wrote=%v patches=%d err=%v, want one patch", news, patches, err)
	}
}

// A cache that has not yet seen the MachinePoolSync a sync ago created (our
// spoke writes' events brought the cluster back first) costs no error: the
// create finds it, the status is read from the hub and written over it.
func TestWriteStatusCacheWithoutOurCreate(t *testing.T) {
	patches := 0
	hidden := false
	r, mp := statusHub(&patches, func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*v1alpha1.MachinePoolSync); ok && hidden {
			return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("machinepoolsyncs").GroupResource(), key.Name)
		}
		return c.Get(ctx, key, obj, opts...)
	})
	ctx := context.Background()
	st := v1alpha1.MachinePoolSyncStatus{Cluster: "c", Pool: "infra", Phase: v1alpha1.PhaseUnreachable, Reason: "Connecting"}
	if _, err := r.writeStatus(ctx, mp, st, false, metav1.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	hidden = true
	st.Phase = v1alpha1.PhaseInSync
	live := r.Live
	r.Live = nil
	if _, err := r.writeStatus(ctx, mp, st, true, metav1.Now(), time.Now()); !apierrors.IsAlreadyExists(err) {
		t.Errorf("without a live reader: %v, want the create's AlreadyExists", err)
	}
	r.Live = live
	news, err := r.writeStatus(ctx, mp, st, true, metav1.Now(), time.Now())
	if err != nil || !news || patches != 1 {
		t.Fatalf("over a cache without our create: wrote=%v patches=%d err=%v, want one status patch", news, patches, err)
	}
	got := &v1alpha1.MachinePoolSync{}
	if err := r.Live.Get(ctx, client.ObjectKeyFromObject(mp), got); err != nil || got.Status.Phase != v1alpha1.PhaseInSync {
		t.Errorf("the hub holds %q (%v), want %q", got.Status.Phase, err, v1alpha1.PhaseInSync)
	}
}

// A change whose status write failed is said by the next write of its pool's
// status, with its time and count; a pool made again under the same name
// (another UID) does not say it.
func TestUnsaidChangeStaysWithItsPool(t *testing.T) {
	patches := 0
	r, mp := statusHub(&patches, nil)
	failing := false
	r.Hub = interceptor.NewClient(r.Hub.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, o ...client.SubResourcePatchOption) error {
			if failing {
				return apierrors.NewServiceUnavailable("the hub is restarting")
			}
			return c.SubResource(sub).Patch(ctx, obj, p, o...)
		},
	})
	ctx := context.Background()
	st := Status(PoolResult{Cluster: "ns/c", PoolName: "infra"})
	st.Phase = v1alpha1.PhaseInSync
	t0 := metav1.NewTime(time.Unix(1000, 0))
	if _, err := r.writeStatus(ctx, mp, st, false, t0, t0.Time); err != nil {
		t.Fatal(err)
	}
	changedAt := metav1.NewTime(t0.Add(time.Minute))
	failChange := func() {
		t.Helper()
		failing = true
		defer func() { failing = false }()
		patched := st
		patched.Patched = 3
		if _, err := r.writeStatus(ctx, mp, patched, true, changedAt, changedAt.Time); err == nil {
			t.Fatal("the status write of a change did not fail")
		}
	}
	later := metav1.NewTime(t0.Add(time.Hour))

	failChange()
	again := mp.DeepCopy()
	again.UID = "u-again"
	if news, err := r.writeStatus(ctx, again, st, false, later, later.Time); err != nil || news {
		t.Errorf("a pool made again under the name: wrote=%v err=%v, want nothing to say", news, err)
	}

	failChange()
	if news, err := r.writeStatus(ctx, mp, st, false, later, later.Time); err != nil || !news {
		t.Fatalf("its own pool: wrote=%v err=%v, want the change said", news, err)
	}
	got := &v1alpha1.MachinePoolSync{}
	if err := r.Live.Get(ctx, client.ObjectKeyFromObject(mp), got); err != nil {
		t.Fatal(err)
	}
	if at := got.Status.LastChangeTime; at == nil || !at.Equal(&changedAt) || got.Status.Patched != 3 {
		t.Errorf("lastChangeTime %v, patched %d; want %v and 3, the failed write's", at, got.Status.Patched, changedAt)
	}
}

// A MachinePoolSync whose first status was never written (the write after its
// create failed) gets its status whole, not as a merge patch that would leave
// out the required counts when they are 0.
func TestWriteStatusNeverWritten(t *testing.T) {
	patches := 0
	r, mp := statusHub(&patches, nil)
	ctx := context.Background()
	bare := &v1alpha1.MachinePoolSync{ObjectMeta: metav1.ObjectMeta{Namespace: mp.Namespace, Name: mp.Name}}
	if err := r.Hub.Create(ctx, bare); err != nil {
		t.Fatal(err)
	}
	st := v1alpha1.MachinePoolSyncStatus{Cluster: "c", Pool: "infra", Phase: v1alpha1.PhaseInSync}
	if news, err := r.writeStatus(ctx, mp, st, false, metav1.Now(), time.Now()); err != nil || !news || patches != 0 {
		t.Errorf("wrote=%v patches=%d err=%v, want the status written whole (no patch)", news, patches, err)
	}
	if news, err := r.writeStatus(ctx, mp, st, true, metav1.Now(), time.Now()); err != nil || !news || patches != 1 {
		t.Errorf("then: wrote=%v patches=%d err=%v, want a merge patch", news, patches, err)
	}
}

// A status write the hub fails is retried on its own backoff, which a later
// sync that writes every status resets; one the hub refuses goes back to the
// controller's backoff as an error. Nothing else would bring the cluster back:
// its spoke is in sync.
func TestReconcileRetriesFailedStatusWrites(t *testing.T) {
	w := newWorld(t, 3, Options{})
	base := w.r.Opts.RetryBase
	down := apierrors.NewServiceUnavailable("the hub is restarting")
	w.statusErr = down

	res, err := w.reconcile(t)
	if err != nil || res.RequeueAfter != base {
		t.Fatalf("first failed status write: requeue %v, err %v; want %v, no error", res.RequeueAfter, err, base)
	}
	if w.spoke.patchCount() != 6 {
		t.Fatalf("%d spoke patches, want 6 (3 Machines, 3 Nodes)", w.spoke.patchCount())
	}
	changedBy := metav1.Now() // the change was made, and its status not written, by then
	if res, err = w.reconcile(t); err != nil || res.RequeueAfter != 2*base {
		t.Errorf("second: requeue %v, err %v; want %v", res.RequeueAfter, err, 2*base)
	}
	for range 20 {
		res, _ = w.reconcile(t)
	}
	if want := w.r.Opts.OutageProbeInterval; res.RequeueAfter != want {
		t.Errorf("after 22 failures: requeue %v, want the outage probe interval %v", res.RequeueAfter, want)
	}
	if got := testutil.ToFloat64(w.r.Metrics.StatusWriteFailures.WithLabelValues(statusWriteTransient)); got != 22 {
		t.Errorf("status_write_failures_total{reason=transient} = %v, want 22", got)
	}

	w.statusErr = nil
	res, err = w.reconcile(t)
	if st := w.poolSync(t).Status; err != nil || st.Phase != v1alpha1.PhaseInSync {
		t.Fatalf("once the hub answers: phase %q, err %v; want InSync", st.Phase, err)
	}
	if at := w.poolSync(t).Status.LastChangeTime; at == nil || at.After(changedBy.Time) {
		t.Errorf("lastChangeTime %v, want the time of the first sync's writes, before %v", at, changedBy)
	}
	if got := w.poolSync(t).Status.Patched; got != 6 {
		t.Errorf("patched %d, want 6: the objects the first sync wrote, which the retry says", got)
	}
	if res.RequeueAfter < w.r.Opts.ResyncPeriod/2 {
		t.Errorf("in sync with its status written: requeue %v, want the resync", res.RequeueAfter)
	}
	if w.spoke.patchCount() != 6 {
		t.Errorf("%d spoke patches, want still 6: the retries wrote the status alone", w.spoke.patchCount())
	}

	// Written once, the backoff starts again from its base.
	w.statusErr = down
	w.setPoolLabel(t, "b")
	if res, err = w.reconcile(t); err != nil || res.RequeueAfter != base {
		t.Errorf("a new failure after a success: requeue %v, err %v; want %v", res.RequeueAfter, err, base)
	}

	w.statusErr = apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("MachinePoolSync").GroupKind(), w.cd.Name, nil)
	if _, err = w.reconcile(t); err == nil || !apierrors.IsInvalid(err) {
		t.Errorf("a refused status write: err %v, want the hub's Invalid, for the controller's backoff", err)
	}
	if got := testutil.ToFloat64(w.r.Metrics.StatusWriteFailures.WithLabelValues(statusWriteRefused)); got != 1 {
		t.Errorf("status_write_failures_total{reason=refused} = %v, want 1", got)
	}
}

// The status says what the pool declares and, for nmsync.DroppedTTL, what it
// dropped and when it was first seen gone; what the pool declares again
// leaves the list, and a refused spec changes neither. The planner reads it
// back (Reconciler.dropped).
func TestWriteStatusDeclaredAndDropped(t *testing.T) {
	writes := 0
	r, mp := statusHub(&writes, nil)
	ctx := context.Background()
	st := v1alpha1.MachinePoolSyncStatus{Cluster: "c", Pool: "infra", Phase: v1alpha1.PhaseInSync}
	t0 := time.Unix(1000, 0).UTC()
	write := func(at time.Time, mutate func(*hivev1.MachinePoolSpec)) v1alpha1.MachinePoolSyncStatus {
		t.Helper()
		mutate(&mp.Spec)
		if _, err := r.writeStatus(ctx, mp, st, false, metav1.NewTime(at), at); err != nil {
			t.Fatal(err)
		}
		got, err := poolSyncOf(ctx, r, mp)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := write(t0, func(s *hivev1.MachinePoolSpec) {
		s.Labels = map[string]string{"a": "1", "b": "1"}
		s.Taints = []corev1.Taint{{Key: "t", Value: "1", Effect: corev1.TaintEffectNoSchedule}}
	})
	if want := []string{"label/a=1", "label/b=1", "taint/t:NoSchedule=1"}; !slices.Equal(got.Declared, want) || len(got.Dropped) != 0 {
		t.Fatalf("declared %v dropped %v, want %v and nothing", got.Declared, got.Dropped, want)
	}
	got = write(t0.Add(time.Minute), func(s *hivev1.MachinePoolSpec) { s.Labels = map[string]string{"a": "2"}; s.Taints = nil })
	wantDropped := []v1alpha1.DroppedItem{{Item: "label/a=1", Time: metav1.NewTime(t0.Add(time.Minute))},
		{Item: "label/b=1", Time: metav1.NewTime(t0.Add(time.Minute))}, {Item: "taint/t:NoSchedule=1", Time: metav1.NewTime(t0.Add(time.Minute))}}
	if !equality.Semantic.DeepEqual(got.Dropped, wantDropped) || !slices.Equal(got.Declared, []string{"label/a=2"}) {
		t.Fatalf("after dropping: declared %v dropped %v, want [label/a=2] and %v", got.Declared, got.Dropped, wantDropped)
	}
	d, _, err := nmsync.DesiredFromPool(mp.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if planned := r.dropped(ctx, mp, d, t0.Add(2*time.Minute)); len(planned) != 3 || !planned["label/b=1"].Equal(t0.Add(time.Minute)) {
		t.Errorf("the planner reads back %v", planned)
	}
	got = write(t0.Add(2*time.Minute), func(s *hivev1.MachinePoolSpec) { s.Labels["b"] = "1" })
	if len(got.Dropped) != 2 || got.Dropped[0].Item != "label/a=1" {
		t.Errorf("declared again: dropped %v, want label/b=1 gone", got.Dropped)
	}
	got = write(t0.Add(3*time.Minute), func(s *hivev1.MachinePoolSpec) { s.Labels["bad key!"] = "1" })
	if len(got.Dropped) != 2 || len(got.Declared) != 2 {
		t.Errorf("refused spec: declared %v dropped %v, want them as they were", got.Declared, got.Dropped)
	}
	got = write(t0.Add(time.Minute+nmsync.DroppedTTL), func(s *hivev1.MachinePoolSpec) { delete(s.Labels, "bad key!") })
	if len(got.Dropped) != 0 {
		t.Errorf("after DroppedTTL: dropped %v, want nothing", got.Dropped)
	}
}

func poolSyncOf(ctx context.Context, r *Reconciler, mp *hivev1.MachinePool) (v1alpha1.MachinePoolSyncStatus, error) {
	got := &v1alpha1.MachinePoolSync{}
	err := r.Live.Get(ctx, client.ObjectKeyFromObject(mp), got)
	return got.Status, err
}

// A MachinePoolSync left by a deleted pool of the same name (not collected
// yet) says nothing of what the new pool dropped.
func TestDroppedOfAnotherPoolIsNotRead(t *testing.T) {
	writes := 0
	r, mp := statusHub(&writes, nil)
	ctx := context.Background()
	st := v1alpha1.MachinePoolSyncStatus{Cluster: "c", Pool: "infra", Phase: v1alpha1.PhaseInSync}
	t0 := time.Unix(1000, 0).UTC()
	mp.Spec.Labels = map[string]string{"a": "1"}
	if _, err := r.writeStatus(ctx, mp, st, false, metav1.NewTime(t0), t0); err != nil {
		t.Fatal(err)
	}
	again := mp.DeepCopy()
	again.UID, again.Spec.Labels = "u2", nil
	d, _, _ := nmsync.DesiredFromPool(again.Spec)
	if got := r.dropped(ctx, again, d, t0.Add(time.Minute)); len(got) != 0 {
		t.Errorf("the new pool plans with the old one's drops: %v", got)
	}
	if got := r.dropped(ctx, mp, d, t0.Add(time.Minute)); len(got) != 1 {
		t.Errorf("the pool itself: %v, want label/a=1", got)
	}
	if _, err := r.writeStatus(ctx, again, st, false, metav1.NewTime(t0.Add(time.Minute)), t0); err != nil {
		t.Fatal(err)
	}
	if got, _ := poolSyncOf(ctx, r, again); len(got.Dropped) != 0 {
		t.Errorf("the status written for the new pool keeps the old one's drops: %v", got.Dropped)
	}
	if news, err := r.writeStatus(ctx, again, st, false, metav1.NewTime(t0.Add(2*time.Minute)), t0); err != nil || news {
		t.Errorf("the same status again over the old pool's object: wrote %v (%v), want nothing", news, err)
	}
}
