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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlleader "sigs.k8s.io/controller-runtime/pkg/leaderelection"

	"github.com/openshift/hub-node-metadata/pkg/remote"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// DefaultStandbyWarmAfter is how long a standby waits, once the leader has stopped renewing
// the shard's Lease, before it connects to the shard's spokes (--standby-warm-after), with the
// default Lease timings. A healthy leader renews every RetryPeriod (2 s); one whose renewal
// timed out (its client gives up after RenewDeadline/2, 5 s) renews RetryPeriod later, 7 s
// after the one before: a slow hub is not a dead leader, and warming then would read every
// Secret of the shard while the hub is slow. With other timings it is derived from them
// (ManagerConfig.timings).
const DefaultStandbyWarmAfter = 8 * time.Second

// A failover has two waits: the Lease (a killed leader does not release it, so the standby
// takes it only once it expires, LeaseDuration after the last renewal it saw) and the connects
// (2,000 clusters take about 40 s in make bench). A standby that waits for the first to start
// the second pays both. It need not: connecting writes nothing (a connect reads the
// kubeconfig Secret, then lists and watches the spoke), and only writes need the Lease. So a
// standby that sees the Lease left unrenewed for StandbyWarmAfter (the leader renews it every
// RetryPeriod, 2 s) connects the shard's clusters, those the fleet controller would connect,
// while it waits; once elected, the fleet controller finds them connected. If another replica
// holds the Lease again (the leader was slow, not dead, or a third replica took it), the standby
// drops what it connected: a standby at rest holds no connection. The warm-up stops when this
// replica writes the Lease as its holder, before the fleet controller starts, so that from then
// on only the fleet controller Ensures clusters.
//
// The standby learns of the Lease from its own elector's reads (leaseObserver), which it sends
// anyway, every RetryPeriod: the warmer adds no request to the hub until it warms.

// leaseObserver is the manager's leader election lock, wrapped to see what its elector reads
// and writes. It says when the Lease's record last changed, by this process's clock, as the
// elector itself judges expiry, and calls acquired after each write of the Lease that names
// this replica its holder (taking it, then renewing it), before the elector goes on.
type leaseObserver struct {
	resourcelock.Interface
	now      func() time.Time
	acquired func() // set before the manager starts; nil: nothing to call
	// fence learns of each write of the Lease that went through, and when it
	// was sent; nil: none.
	fence *fence

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

func (o *leaseObserver) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	sent := o.fence.stamp()
	err := o.Interface.Create(ctx, rec)
	o.wrote(rec, sent, err)
	return err
}

func (o *leaseObserver) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	sent := o.fence.stamp()
	err := o.Interface.Update(ctx, rec)
	o.wrote(rec, sent, err)
	return err
}

// wrote tells the fence of a write of the Lease sent at sent that went through, and calls
// acquired after one naming this replica: the elector starts the leader's work (the fleet
// controller) only after the write returns.
func (o *leaseObserver) wrote(rec resourcelock.LeaderElectionRecord, sent time.Time, err error) {
	if err != nil {
		return
	}
	holds := rec.HolderIdentity != "" && rec.HolderIdentity == o.Identity()
	if o.fence != nil {
		o.fence.held(sent, holds)
	}
	if holds && o.acquired != nil {
		o.acquired()
	}
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
	return !v.changed.IsZero() && v.otherHolder() && now.Sub(v.changed) >= after
}

// otherHolder says whether another replica holds the Lease. A released Lease ("") is no one's:
// this replica's elector may take it at its next try.
func (v leaseView) otherHolder() bool { return v.holder != "" && v.holder != v.self }

// standbyWarmer connects a standby's clusters while the leader's Lease runs out (see above).
type standbyWarmer struct {
	lease   *leaseObserver
	after   time.Duration
	elected <-chan struct{}
	hub     hubCache
	spokes  interface {
		Ensure(ctx context.Context, cd *hivev1.ClusterDeployment) remote.Status
		Forget(cluster types.NamespacedName)
	}
	inShard func(namespace, name string) bool
	workers int
	log     logr.Logger
	warmups prometheus.Counter // standby_warmups_total
	now     func() time.Time

	mu       sync.Mutex
	leading  bool   // this replica wrote the Lease as its holder: it warms no more
	stop     func() // stops the running warm-up and waits for it; nil when none runs
	warmedAt time.Time
	warmed   []types.NamespacedName
}

// hubCache is what the warmer needs of the manager's cache: the ClusterDeployments, and to
// stop the Secret-metadata informer a warm-up started (Ensure reads Secrets' versions from it)
// once it lets its clusters go, so that a standby at rest watches no more than before.
type hubCache interface {
	client.Reader
	RemoveInformer(ctx context.Context, obj client.Object) error
}

// NeedLeaderElection is false: it runs in the standby, and stops once elected.
func (w *standbyWarmer) NeedLeaderElection() bool { return false }

func (w *standbyWarmer) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			w.endWarming() // the remote Manager drops every connection itself
			return nil
		case <-w.elected:
			w.endWarming()
			w.handOver(ctx)
			return nil
		case <-w.lease.seen:
		}
		w.look(ctx)
	}
}

// look starts or ends a warm-up after the elector read the Lease.
func (w *standbyWarmer) look(ctx context.Context) {
	v, now := w.lease.view(), w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.leading:
	case w.warmedAt.IsZero() && v.stalled(now, w.after):
		w.warmedAt = now
		w.warmups.Inc()
		w.log.Info("the leader has not renewed the Lease: connecting this shard's clusters while it runs out", "holder", v.holder, "unrenewedFor", now.Sub(v.changed).Round(time.Millisecond).String())
		w.stop = w.startWarming(ctx)
	case !w.warmedAt.IsZero() && v.changed.After(w.warmedAt) && v.otherHolder():
		// Another replica holds the Lease again: its holder renewed it after all (it was
		// slow, not dead), or a third replica took it.
		stop := w.stop
		w.stop = nil
		w.mu.Unlock()
		if stop != nil {
			stop()
		}
		w.mu.Lock()
		if w.leading { // elected meanwhile: the clusters are the fleet controller's
			return
		}
		for _, key := range w.warmed {
			w.spokes.Forget(key)
		}
		if err := w.hub.RemoveInformer(ctx, SecretMetadata()); err != nil {
			w.log.Error(err, "cannot stop the Secret-metadata informer of the warm-up")
		}
		w.log.Info("another replica holds the Lease: disconnected the clusters connected meanwhile", "holder", v.holder, "clusters", len(w.warmed))
		w.warmed, w.warmedAt = nil, time.Time{}
	}
}

// endWarming ends warming for good: this replica holds the Lease (the lock calls it after each
// write naming it holder), or stops. A warm-up under way is stopped and waited for, so that the
// fleet controller, which starts once the elector's write returns, is the only one to Ensure
// clusters from then on.
func (w *standbyWarmer) endWarming() {
	w.mu.Lock()
	w.leading = true
	stop := w.stop
	w.stop = nil
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// handOver leaves the warmed clusters to the fleet controller, which Ensures every cluster it
// reconciles; it forgets only those whose ClusterDeployment was deleted meanwhile, which the
// fleet controller would never reconcile again.
func (w *standbyWarmer) handOver(ctx context.Context) {
	w.mu.Lock()
	warmed, at := w.warmed, w.warmedAt
	w.warmed = nil
	w.mu.Unlock()
	if at.IsZero() {
		return
	}
	gone := 0
	for _, key := range warmed {
		if err := w.hub.Get(ctx, key, &hivev1.ClusterDeployment{}); apierrors.IsNotFound(err) {
			w.spokes.Forget(key)
			gone++
		}
	}
	w.log.Info("elected: the clusters connected while the Lease ran out are the fleet controller's now", "clusters", len(warmed)-gone, "deletedMeanwhile", gone, "warmingFor", w.now().Sub(at).Round(time.Millisecond).String())
}

// startWarming runs warm in the background; the func it returns stops it and waits for it.
func (w *standbyWarmer) startWarming(ctx context.Context) (stop func()) {
	stopCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.warm(ctx, stopCtx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// warm Ensures every cluster of the shard that the fleet controller would connect, workers at
// a time, until stop is done. Each ClusterDeployment is read again from the cache right before
// its Ensure (the list may be seconds old by then), and each Ensure runs under ctx, not stop:
// one cut short would record a failed Secret read as the cluster's answer.
func (w *standbyWarmer) warm(ctx, stop context.Context) {
	cds := &hivev1.ClusterDeploymentList{}
	if err := w.hub.List(stop, cds); err != nil {
		w.log.Error(err, "cannot list ClusterDeployments to connect while the Lease runs out")
		return
	}
	g := &errgroup.Group{}
	g.SetLimit(max(w.workers, 1))
	for i := range cds.Items {
		key := types.NamespacedName{Namespace: cds.Items[i].Namespace, Name: cds.Items[i].Name}
		if !w.inShard(key.Namespace, key.Name) || !connectsTo(&cds.Items[i]) {
			continue
		}
		g.Go(func() error {
			cd := &hivev1.ClusterDeployment{}
			if stop.Err() != nil || w.hub.Get(stop, key, cd) != nil || !connectsTo(cd) {
				return nil
			}
			w.mu.Lock()
			w.warmed = append(w.warmed, key)
			w.mu.Unlock()
			w.spokes.Ensure(ctx, cd)
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
// wrapped in a leaseObserver; renew is the renew deadline the manager runs with, which sizes
// the lock client's timeout. The lock records an Event when this replica becomes leader; the
// manager that makes event recorders does not exist yet, so its recorder is bound later.
func newObservedLock(cfg *rest.Config, namespace string, renew time.Duration, id string, recorders *lateRecorders, now func() time.Time) (*leaseObserver, error) {
	lock, err := ctrlleader.NewResourceLock(rest.CopyConfig(cfg), recorders, ctrlleader.Options{
		LeaderElection:          true,
		LeaderElectionID:        id,
		LeaderElectionNamespace: namespace,
		RenewDeadline:           renew,
	})
	if err != nil {
		return nil, fmt.Errorf("leader election lock: %w", err)
	}
	return newLeaseObserver(lock, now), nil
}
