package fleet

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlleader "sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/openshift/hub-node-metadata/pkg/remote"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// DefaultStandbyWarmAfter is how long a standby waits, once the leader has stopped renewing
// the shard's Lease, before it connects to the shard's spokes (--standby-warm-after).
const DefaultStandbyWarmAfter = 5 * time.Second

// A failover has two waits: the Lease (a killed leader does not release it, so the standby
// takes it only once it expires, LeaseDuration after the last renewal it saw) and the connects
// (2,000 clusters take about 40 s in make bench). A standby that waits for the first to start
// the second pays both. It need not: connecting writes nothing (a connect reads the
// kubeconfig Secret, then lists and watches the spoke), and only writes need the Lease. So a
// standby that sees the Lease left unrenewed for StandbyWarmAfter (the leader renews it every
// RetryPeriod, 2 s) connects the shard's clusters, those the fleet controller would connect,
// while it waits; once elected, the fleet controller finds them connected. If the Lease moves
// again without it (the leader was slow, not dead, or another replica took it), the standby
// drops what it connected: a standby at rest holds no connection.
//
// The standby learns of the Lease from its own elector's reads (leaseObserver), which it sends
// anyway, every RetryPeriod: the warmer adds no request to the hub until it warms.

// leaseObserver is the manager's leader election lock, wrapped to see what its elector reads.
// It says when the Lease's record last changed, by this process's clock, as the elector itself
// judges expiry.
type leaseObserver struct {
	resourcelock.Interface
	now func() time.Time

	mu      sync.Mutex
	raw     []byte // the record last read
	holder  string
	changed time.Time     // when a read first showed raw
	seen    chan struct{} // cap 1: a read happened since the warmer last looked
}

func newLeaseObserver(lock resourcelock.Interface, now func() time.Time) *leaseObserver {
	return &leaseObserver{Interface: lock, now: now, seen: make(chan struct{}, 1)}
}

func (o *leaseObserver) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := o.Interface.Get(ctx)
	if err != nil || rec == nil {
		return rec, raw, err
	}
	o.mu.Lock()
	if !bytes.Equal(raw, o.raw) {
		o.raw, o.holder, o.changed = bytes.Clone(raw), rec.HolderIdentity, o.now()
	}
	o.mu.Unlock()
	select {
	case o.seen <- struct{}{}:
	default:
	}
	return rec, raw, err
}

// leaseView is what the warmer knows of the Lease.
type leaseView struct {
	holder, self string
	changed      time.Time // zero: never read
}

func (o *leaseObserver) view() leaseView {
	o.mu.Lock()
	defer o.mu.Unlock()
	return leaseView{holder: o.holder, self: o.Identity(), changed: o.changed}
}

// stalled says whether another replica holds the Lease and has not renewed it for after.
func (v leaseView) stalled(now time.Time, after time.Duration) bool {
	return !v.changed.IsZero() && v.holder != "" && v.holder != v.self && now.Sub(v.changed) >= after
}

// standbyWarmer connects a standby's clusters while the leader's Lease runs out (see above).
type standbyWarmer struct {
	lease   *leaseObserver
	after   time.Duration
	elected <-chan struct{}
	hub     client.Reader // the manager's cache
	spokes  interface {
		Ensure(ctx context.Context, cd *hivev1.ClusterDeployment) remote.Status
		Forget(cluster types.NamespacedName)
	}
	inShard func(namespace, name string) bool
	workers int
	log     logr.Logger
	warmups prometheus.Counter // standby_warmups_total
	now     func() time.Time
}

// NeedLeaderElection is false: it runs in the standby, and stops once elected.
func (w *standbyWarmer) NeedLeaderElection() bool { return false }

func (w *standbyWarmer) Start(ctx context.Context) error {
	var (
		stopWarming func()    // set while a warm-up runs
		warmedAt    time.Time // zero: not warm
		mu          sync.Mutex
		warmed      []types.NamespacedName
	)
	finish := func() {
		if stopWarming != nil {
			stopWarming()
			stopWarming = nil
		}
	}
	for {
		select {
		case <-ctx.Done():
			finish()
			return nil
		case <-w.elected:
			// The fleet controller now Ensures every cluster itself: those warmed are
			// connected or connecting, the others start now.
			finish()
			if !warmedAt.IsZero() {
				mu.Lock()
				w.log.Info("elected: the clusters connected while the Lease ran out are the fleet controller's now", "clusters", len(warmed), "warmingFor", w.now().Sub(warmedAt).Round(time.Millisecond).String())
				mu.Unlock()
			}
			return nil
		case <-w.lease.seen:
		}
		v, now := w.lease.view(), w.now()
		switch {
		case warmedAt.IsZero() && v.stalled(now, w.after):
			warmedAt = now
			w.warmups.Inc()
			w.log.Info("the leader has not renewed the Lease: connecting this shard's clusters while it runs out", "holder", v.holder, "unrenewedFor", now.Sub(v.changed).Round(time.Millisecond).String())
			stopWarming = w.startWarming(ctx, func(key types.NamespacedName) {
				mu.Lock()
				warmed = append(warmed, key)
				mu.Unlock()
			})
		case !warmedAt.IsZero() && v.changed.After(warmedAt) && v.holder != v.self:
			// The Lease moved on without this replica: its holder renewed it after all (it
			// was slow, not dead), or another replica took it.
			finish()
			mu.Lock()
			for _, key := range warmed {
				w.spokes.Forget(key)
			}
			w.log.Info("the Lease was renewed by another replica: disconnected the clusters connected meanwhile", "holder", v.holder, "clusters", len(warmed))
			warmed = nil
			mu.Unlock()
			warmedAt = time.Time{}
		}
	}
}

// startWarming runs warm in the background; the func it returns stops it and waits for it.
func (w *standbyWarmer) startWarming(ctx context.Context, record func(types.NamespacedName)) (stop func()) {
	stopCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.warm(ctx, stopCtx, record)
	}()
	return func() {
		cancel()
		<-done
	}
}

// warm Ensures every cluster of the shard that the fleet controller would connect, workers at
// a time, until stop is done. Each Ensure runs under ctx, not stop: one cut short would record
// a failed Secret read as the cluster's answer.
func (w *standbyWarmer) warm(ctx, stop context.Context, record func(types.NamespacedName)) {
	cds := &hivev1.ClusterDeploymentList{}
	if err := w.hub.List(stop, cds); err != nil {
		w.log.Error(err, "cannot list ClusterDeployments to connect while the Lease runs out")
		return
	}
	g := &errgroup.Group{}
	g.SetLimit(max(w.workers, 1))
	for i := range cds.Items {
		cd := &cds.Items[i]
		if !w.inShard(cd.Namespace, cd.Name) || !connectsTo(cd) {
			continue
		}
		g.Go(func() error {
			if stop.Err() == nil {
				record(types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name})
				w.spokes.Ensure(ctx, cd)
			}
			return nil
		})
	}
	_ = g.Wait()
}

// connectsTo says whether the fleet controller connects to cd's spoke: it does for every
// cluster Decide does not find paused or ineligible, whatever its pools.
func connectsTo(cd *hivev1.ClusterDeployment) bool {
	if cd.Annotations[nmsync.AnnotationPaused] == "true" {
		return false
	}
	ok, _, _ := remote.Eligible(cd)
	return ok
}

// newObservedLock builds the Lease lock controller-runtime would (ctrlleader.NewResourceLock),
// wrapped in a leaseObserver. The lock records an Event when this replica becomes leader; the
// manager that makes event recorders does not exist yet, so its recorder is bound later.
func newObservedLock(cfg *rest.Config, mc ManagerConfig, id string, recorders *lateRecorders) (*leaseObserver, error) {
	lock, err := ctrlleader.NewResourceLock(rest.CopyConfig(cfg), recorders, ctrlleader.Options{
		LeaderElection:          true,
		LeaderElectionID:        id,
		LeaderElectionNamespace: mc.LeaderElectionNS,
		RenewDeadline:           mc.RenewDeadline,
	})
	if err != nil {
		return nil, fmt.Errorf("leader election lock: %w", err)
	}
	return newLeaseObserver(lock, time.Now), nil
}

// lateRecorders gives out event recorders that forward to the manager's, once set.
type lateRecorders struct {
	mu  sync.Mutex
	mgr manager.Manager
}

func (l *lateRecorders) set(mgr manager.Manager) {
	l.mu.Lock()
	l.mgr = mgr
	l.mu.Unlock()
}

func (l *lateRecorders) manager() manager.Manager {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mgr
}

func (l *lateRecorders) GetEventRecorderFor(name string) record.EventRecorder {
	return lateRecorder{l, name}
}

func (l *lateRecorders) GetEventRecorder(name string) events.EventRecorder {
	if mgr := l.manager(); mgr != nil {
		return mgr.GetEventRecorder(name)
	}
	return nil
}

// lateRecorder is the old events API's recorder (the one client-go's leader election uses).
type lateRecorder struct {
	l    *lateRecorders
	name string
}

func (r lateRecorder) recorder() record.EventRecorder {
	if mgr := r.l.manager(); mgr != nil {
		return mgr.GetEventRecorderFor(r.name) //nolint:staticcheck // client-go's leader election records with the old API
	}
	return nil
}

func (r lateRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	if rec := r.recorder(); rec != nil {
		rec.Event(obj, eventtype, reason, message)
	}
}

func (r lateRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	if rec := r.recorder(); rec != nil {
		rec.Eventf(obj, eventtype, reason, messageFmt, args...)
	}
}

func (r lateRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	if rec := r.recorder(); rec != nil {
		rec.AnnotatedEventf(obj, annotations, eventtype, reason, messageFmt, args...)
	}
}
