package fleet

import (
	"context"
	"encoding/json"
	"slices"
	gosync "sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/openshift/hub-node-metadata/pkg/remote"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// fakeLock is a Lease lock whose record the test sets, as the leader's renewals would.
type fakeLock struct {
	resourcelock.Interface // unused methods panic
	mu                     gosync.Mutex
	rec                    resourcelock.LeaderElectionRecord
	self                   string
}

func (l *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := l.rec
	raw, err := json.Marshal(rec)
	return &rec, raw, err
}

func (l *fakeLock) Identity() string { return l.self }

func (l *fakeLock) Update(_ context.Context, rec resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	l.rec = rec
	l.mu.Unlock()
	return nil
}

// renew is the holder renewing the Lease at t (the leader's clock).
func (l *fakeLock) renew(holder string, t time.Time) {
	l.mu.Lock()
	l.rec = resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 15, RenewTime: metav1.NewTime(t)}
	l.mu.Unlock()
}

// warmedSpokes records what the warmer asks of the spoke connections. While gate is set,
// each Ensure waits for it to close (a slow Secret read).
type warmedSpokes struct {
	mu        gosync.Mutex
	ensured   []string
	forgotten []string
	gate      chan struct{}
	inEnsure  chan struct{} // cap 1: an Ensure started
}

func (s *warmedSpokes) Ensure(_ context.Context, cd *hivev1.ClusterDeployment) remote.Status {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	select {
	case s.inEnsure <- struct{}{}:
	default:
	}
	if gate != nil {
		<-gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ensured = append(s.ensured, cd.Namespace+"/"+cd.Name)
	return remote.Status{Reason: remote.ReasonConnecting}
}

// hubWithInformers is the fake hub as the manager's cache, counting informers removed.
type hubWithInformers struct {
	client.Client
	removed counter
}

func (h *hubWithInformers) RemoveInformer(context.Context, client.Object) error {
	h.removed.add()
	return nil
}

func (s *warmedSpokes) Forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgotten = append(s.forgotten, key.String())
}

func (s *warmedSpokes) calls() (ensured, forgotten []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.ensured)), slices.Sorted(slices.Values(s.forgotten))
}

func TestLeaseObserverDatesEachChangeByItsOwnClock(t *testing.T) {
	lock := &fakeLock{self: "me"}
	now := time.Unix(1000, 0)
	o := newLeaseObserver(lock, func() time.Time { return now })
	if v := o.view(); !v.changed.IsZero() || v.stalled(now, time.Second) {
		t.Fatalf("before any read: %+v", v)
	}
	leaderClock := time.Unix(5000, 0) // another clock: only changes count, not its times
	lock.renew("leader", leaderClock)
	if _, _, err := o.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	now = now.Add(3 * time.Second)
	if _, _, err := o.Get(context.Background()); err != nil { // the same record: no change
		t.Fatal(err)
	}
	v := o.view()
	if v.holder != "leader" || v.self != "me" || !v.changed.Equal(time.Unix(1000, 0)) {
		t.Fatalf("view %+v: want holder leader, self me, changed at 1000", v)
	}
	if !v.stalled(now, 3*time.Second) || v.stalled(now, 4*time.Second) {
		t.Errorf("unrenewed for 3 s: stalled(3s) %v, stalled(4s) %v", v.stalled(now, 3*time.Second), v.stalled(now, 4*time.Second))
	}
	lock.renew("leader", leaderClock.Add(2*time.Second))
	if _, _, err := o.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := o.view(); !v.changed.Equal(now) || v.stalled(now, time.Nanosecond) {
		t.Errorf("after a renewal: %+v", v)
	}
	for _, holder := range []string{"", "me"} { // released, or this replica's own
		lock.renew(holder, leaderClock.Add(4*time.Second))
		if _, _, err := o.Get(context.Background()); err != nil {
			t.Fatal(err)
		}
		if o.view().stalled(now.Add(time.Hour), time.Second) {
			t.Errorf("holder %q: a Lease nobody else holds is never stalled", holder)
		}
	}
}

// standbyHarness runs a standbyWarmer on a fake Lease and hub, with the clock in the test's hands.
type standbyHarness struct {
	t       *testing.T
	lock    *fakeLock
	obs     *leaseObserver
	spokes  *warmedSpokes
	hub     *hubWithInformers
	warmups prometheus.Counter
	elected chan struct{}
	done    chan struct{}
	cancel  context.CancelFunc
	mu      gosync.Mutex
	now     time.Time
}

func cdNamed(ns, name string, mutate func(*hivev1.ClusterDeployment)) *hivev1.ClusterDeployment {
	cd := &hivev1.ClusterDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: hivev1.ClusterDeploymentSpec{Installed: true, ClusterMetadata: &hivev1.ClusterMetadata{
			AdminKubeconfigSecretRef: corev1.LocalObjectReference{Name: name + "-admin-kubeconfig"}}},
		Status: hivev1.ClusterDeploymentStatus{Conditions: []hivev1.ClusterDeploymentCondition{
			{Type: hivev1.UnreachableCondition, Status: corev1.ConditionFalse}}},
	}
	if mutate != nil {
		mutate(cd)
	}
	return cd
}

func startStandby(t *testing.T, inShard func(ns, name string) bool, cds ...client.Object) *standbyHarness {
	return startStandbyWith(t, 3, inShard, cds...)
}

// startStandbyWith starts the warmer with workers Ensures at a time.
func startStandbyWith(t *testing.T, workers int, inShard func(ns, name string) bool, cds ...client.Object) *standbyHarness {
	t.Helper()
	h := &standbyHarness{t: t, lock: &fakeLock{self: "me"}, spokes: &warmedSpokes{inEnsure: make(chan struct{}, 1)}, elected: make(chan struct{}), done: make(chan struct{}),
		warmups: newStandbyWarmups(), now: time.Unix(1000, 0)}
	h.obs = newLeaseObserver(h.lock, h.clock)
	h.hub = &hubWithInformers{Client: fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(cds...).Build()}
	w := &standbyWarmer{lease: h.obs, after: 5 * time.Second, elected: h.elected, hub: h.hub, spokes: h.spokes,
		inShard: inShard, workers: workers, log: testr.New(t), warmups: h.warmups, now: h.clock}
	h.obs.acquired = w.endWarming
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		_ = w.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-h.done
	})
	return h
}

func (h *standbyHarness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

// elector is one read of the Lease by this replica's elector, d after the last.
func (h *standbyHarness) elector(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
	if _, _, err := h.obs.Get(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the warmer looks at each read
}

// waitCalls waits until the spokes saw want Ensures and Forgets, and that nothing more comes.
func (h *standbyHarness) waitCalls(wantEnsured, wantForgotten []string) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ensured, forgotten := h.spokes.calls()
		if slices.Equal(ensured, wantEnsured) && slices.Equal(forgotten, wantForgotten) {
			time.Sleep(50 * time.Millisecond)
			if e, f := h.spokes.calls(); slices.Equal(e, ensured) && slices.Equal(f, forgotten) {
				return
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("Ensured %v, Forgotten %v; want %v and %v", ensured, forgotten, wantEnsured, wantForgotten)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStandbyConnectsOnlyOnceTheLeaseGoesUnrenewed(t *testing.T) {
	h := startStandby(t, func(ns, _ string) bool { return ns != "other-shard" },
		cdNamed("a", "a", nil),
		cdNamed("b", "b", nil),
		cdNamed("paused", "paused", func(cd *hivev1.ClusterDeployment) {
			cd.Annotations = map[string]string{nmsync.AnnotationPaused: "true"}
		}),
		cdNamed("installing", "installing", func(cd *hivev1.ClusterDeployment) { cd.Spec.Installed = false }),
		cdNamed("other-shard", "c", nil))
	leader := time.Unix(9000, 0)
	// A leader whose renewals come 4 s apart (one late), read every 2 s: every other read sees
	// the same record, never for 5 s.
	for i := range 11 { // the last read sees a renewal
		if i%2 == 0 {
			h.lock.renew("leader", leader.Add(time.Duration(i)*2*time.Second))
		}
		h.elector(2 * time.Second)
	}
	h.waitCalls(nil, nil)
	// The leader dies: the same record, read for 4.4 s, then for 5 s (after) and more.
	h.elector(2200 * time.Millisecond)
	h.elector(2200 * time.Millisecond)
	h.waitCalls(nil, nil)
	h.elector(600 * time.Millisecond)
	want := []string{"a/a", "b/b"} // not the paused, the not installed, nor another shard's
	h.waitCalls(want, nil)
	h.elector(2 * time.Second) // still unrenewed: nothing more
	h.waitCalls(want, nil)
	if got := testutil.ToFloat64(h.warmups); got != 1 {
		t.Errorf("standby_warmups_total %v, want 1", got)
	}

	// Elected: the fleet controller takes the connections over; only a cluster deleted
	// meanwhile is forgotten (the fleet controller would never reconcile it again).
	if err := h.hub.Delete(context.Background(), cdNamed("b", "b", nil)); err != nil {
		t.Fatal(err)
	}
	close(h.elected)
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the warmer runs on after the election")
	}
	h.waitCalls(want, []string{"b/b"})
	if n := h.hub.removed.take(); n != 0 {
		t.Errorf("the elected replica's Secret-metadata informer removed %d times", n)
	}
}

func TestStandbyLetsGoWhenTheLeaderRenewsAgain(t *testing.T) {
	h := startStandby(t, func(string, string) bool { return true }, cdNamed("a", "a", nil), cdNamed("b", "b", nil))
	leader := time.Unix(9000, 0)
	h.lock.renew("leader", leader)
	h.elector(2 * time.Second)
	h.elector(5 * time.Second) // frozen, not dead
	h.waitCalls([]string{"a/a", "b/b"}, nil)
	h.lock.renew("leader", leader.Add(7*time.Second))
	h.elector(2 * time.Second)
	h.waitCalls([]string{"a/a", "b/b"}, []string{"a/a", "b/b"})
	if n := h.hub.removed.take(); n != 1 {
		t.Errorf("Secret-metadata informer removed %d times on letting go, want 1", n)
	}

	// It warms again if the Lease goes unrenewed again, and lets go if another replica takes it.
	h.elector(5 * time.Second)
	both := []string{"a/a", "a/a", "b/b", "b/b"}
	h.waitCalls(both, []string{"a/a", "b/b"})
	h.lock.renew("third-replica", leader.Add(20*time.Second))
	h.elector(2 * time.Second)
	h.waitCalls(both, both)
	if got := testutil.ToFloat64(h.warmups); got != 2 {
		t.Errorf("standby_warmups_total %v, want 2", got)
	}
}

func TestStandbyKeepsWhatItConnectedWhenTheLeaseIsReleased(t *testing.T) {
	h := startStandby(t, func(string, string) bool { return true }, cdNamed("a", "a", nil))
	h.lock.renew("leader", time.Unix(9000, 0))
	h.elector(2 * time.Second)
	h.elector(5 * time.Second)
	h.waitCalls([]string{"a/a"}, nil)
	// The old leader released the Lease (a graceful stop after a stall): no one holds it, and
	// this replica's elector takes it at its next try. What was connected stays.
	h.lock.renew("", time.Unix(9010, 0))
	h.elector(time.Second)
	h.waitCalls([]string{"a/a"}, nil)
}

func TestStandbyStopsWarmingWhenItTakesTheLease(t *testing.T) {
	h := startStandbyWith(t, 1, func(string, string) bool { return true }, cdNamed("a", "a", nil), cdNamed("b", "b", nil), cdNamed("c", "c", nil))
	gate := make(chan struct{})
	h.spokes.mu.Lock()
	h.spokes.gate = gate
	h.spokes.mu.Unlock()
	h.lock.renew("leader", time.Unix(9000, 0))
	h.elector(2 * time.Second)
	h.elector(5 * time.Second)
	select {
	case <-h.spokes.inEnsure: // the first Ensure waits on a slow Secret read
	case <-time.After(5 * time.Second):
		t.Fatal("no Ensure started")
	}
	// The elector takes the Lease: its write returns only once the warm-up has stopped and
	// the Ensure under way has finished; no other starts (the fleet controller's from now on).
	took := make(chan error)
	go func() {
		took <- h.obs.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
	}()
	select {
	case err := <-took:
		t.Fatalf("the Lease write returned (%v) while a warm-up's Ensure was under way", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	if err := <-took; err != nil {
		t.Fatal(err)
	}
	ensured, _ := h.spokes.calls()
	time.Sleep(100 * time.Millisecond)
	if again, _ := h.spokes.calls(); len(ensured) != 1 || len(again) != 1 {
		t.Errorf("Ensured %v at the Lease write, %v after: want the one under way only", ensured, again)
	}
}
