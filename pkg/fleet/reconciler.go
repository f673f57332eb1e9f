package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/pkg/remote"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// Field index: MachinePools by their ClusterDeployment's name.
const indexPoolByCluster = "spec.clusterDeploymentRef.name"

// Field index: ClusterDeployments by the name of their admin kubeconfig Secret.
const indexClusterBySecret = "spec.clusterMetadata.adminKubeconfigSecretRef.name"

// Spokes is what the reconciler needs of the spoke connections.
// *remote.Manager implements it; the package's tests use a fake.
type Spokes interface {
	// Ensure records the wish to be connected to cd's spoke (or, for an
	// ineligible cluster, disconnects it) and returns the connection's
	// status. It never waits for a connection.
	Ensure(ctx context.Context, cd *hivev1.ClusterDeployment) remote.Status
	// GetSpoke returns the connected spoke, or an error wrapping
	// remote.ErrNotConnected.
	GetSpoke(cluster types.NamespacedName) (remote.Spoke, error)
	// Status is the connection's status without touching it.
	Status(cluster types.NamespacedName) remote.Status
	// Forget drops the cluster's connection and memory.
	Forget(cluster types.NamespacedName)
}

var _ Spokes = (*remote.Manager)(nil)

// Reconciler syncs every MachinePool of one cluster per request. The request
// is the ClusterDeployment's key.
type Reconciler struct {
	Hub      client.Client
	Spokes   Spokes
	Recorder events.EventRecorder
	Metrics  *Metrics
	Opts     Options
	// Live reads the hub without the cache (the manager's API reader), for the
	// rare read the cache cannot answer yet; nil: none.
	Live client.Reader

	contested *contestTracker
	denials   *denialTracker
	pacer     *pacer
	nodes     *nodeMemory
	outages   *outageWriter
	// judged: cluster -> Machine UID -> the version at which its unrecorded
	// items were judged to stay (Desired.Judged).
	judged *clusterMap[map[types.UID]string]
	// propagation times pool changes for pool_propagation_seconds.
	propagation *propagationClock
	lastPools   *clusterMap[map[string]bool] // cluster -> pool names with series
	lastConn    *clusterMap[remote.Reason]   // cluster -> last connection reason seen
	// statusRetry spaces the retries of status writes that failed
	// transiently, per cluster (retryStatus).
	statusRetry *statusBackoff
	// unsaid is, per pool (namespace/name), a change its last status write
	// failed to say: the retry, which changes nothing itself, says it.
	unsaid *clusterMap[unsaidChange]
	// written is the last status this controller wrote per pool (namespace/name),
	// with the resourceVersion the write returned: the cache may not show it yet.
	written *clusterMap[writtenStatus]
	// memories are Metrics and the fields above, each registered once (init):
	// forget forgets a cluster in every one (forget.go).
	memories []clusterMemory
}

// now is the time on the reconciler's clock (Options.Clock).
func (r *Reconciler) now() time.Time {
	if r.Opts.Clock == nil {
		return time.Now()
	}
	return r.Opts.Clock.Now()
}

func (r *Reconciler) init() {
	if r.memories != nil {
		return
	}
	r.contested = newContestTracker(r.Opts.ContestedThreshold, r.Opts.ContestedWindow, r.now)
	r.denials = newDenialTracker(r.Opts.DeniedRetry, r.now)
	r.pacer = newPacer()
	r.nodes = newNodeMemory(r.Opts.NodeSettle, r.now)
	r.outages = &outageWriter{outageTracker: newOutageTracker(r.Opts.OutageProbeInterval, r.now),
		next: plainWriter{limit: r.Opts.WritesPerCluster}, metrics: r.Metrics}
	r.propagation = newPropagationClock()
	most := r.Opts.OutageProbeInterval
	if most <= 0 {
		most = r.Opts.RetryCap
	}
	r.statusRetry = &statusBackoff{workqueue.NewTypedItemExponentialFailureRateLimiter[string](r.Opts.RetryBase, max(r.Opts.RetryBase, most))}
	r.lastPools = perCluster[map[string]bool]()
	r.written = perPool[writtenStatus]()
	r.unsaid = perPool[unsaidChange]()
	r.lastConn = perCluster[remote.Reason]()
	r.judged = perCluster[map[types.UID]string]()
	r.memories = []clusterMemory{r.Metrics, r.contested, r.denials, r.pacer, r.nodes, r.propagation, r.outages,
		r.statusRetry, r.lastPools, r.written, r.unsaid, r.lastConn, r.judged}
}

// Reconcile reads the hub and the spoke, plans, then writes.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.init()
	start := r.now()
	key := req.NamespacedName
	ck := key.String()
	logger := log.FromContext(ctx).WithValues("cluster", ck)
	ctx = log.IntoContext(ctx, logger)
	if r.Opts.WriteFence != nil {
		if err := r.Opts.WriteFence(); err != nil {
			// The Lease may be another replica's: this one syncs nothing, reports
			// nothing, and tries again shortly, by when its elector has renewed
			// the Lease or given it up (and the process exits).
			logger.V(1).Info("not syncing", "reason", err.Error())
			return reconcile.Result{RequeueAfter: r.Opts.RetryBase}, nil
		}
	}

	cd := &hivev1.ClusterDeployment{}
	if err := r.Hub.Get(ctx, key, cd); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key)
			return reconcile.Result{}, r.reportOrphans(ctx, key)
		}
		return reconcile.Result{}, fmt.Errorf("get ClusterDeployment: %w", err)
	}
	if !cd.DeletionTimestamp.IsZero() {
		r.forget(key)
		return reconcile.Result{}, nil
	}
	pools, err := r.listPools(ctx, cd)
	if err != nil {
		return reconcile.Result{}, err
	}

	res, state, syncErr := r.syncCluster(ctx, cd, pools)
	statusErr := r.report(ctx, cd, pools, res, state, start)
	result := "ok"
	if syncErr != nil {
		result = "error"
	}
	r.Metrics.SyncDuration.WithLabelValues(result).Observe(r.now().Sub(start).Seconds())
	if syncErr != nil {
		return reconcile.Result{}, syncErr
	}
	after, err := r.next(ck, res)
	return r.retryStatus(ctx, ck, statusErr, after, err)
}

// next decides when to look at a cluster again after a sync.
//   - A cluster in a write outage (every write failed transiently, none went
//     through; outage.go): when its next probe is due, OutageProbeInterval
//     after the last one, whatever the outage's length.
//   - Writes that failed transiently (timeouts, 5xx, 429, conflicts that
//     outlasted their retries) while others went through: after RetryBase.
//     With probes turned off, a retry that wrote nothing waits for the
//     controller's per-cluster backoff (RetryBase doubling to RetryCap), by
//     returning an error.
//   - Objects held after a denial: when the first of them may be retried.
//   - A paced NoExecute rollout: when its next batch is due.
//   - Otherwise the safety-net resync: watches and connect events bring the
//     cluster back sooner.
func (r *Reconciler) next(cluster string, res []PoolResult) (reconcile.Result, error) {
	transient, progress, settling := 0, false, false
	var batchDue time.Time
	for _, pr := range res {
		c := Count(pr.Results)
		transient += c.Transient
		progress = progress || c.Patched > 0
		settling = settling || c.Settling > 0
		if ro := pr.Rollout; ro != nil && !ro.NextBatch.IsZero() && (batchDue.IsZero() || ro.NextBatch.Before(batchDue)) {
			batchDue = ro.NextBatch
		}
	}
	if d, ok := r.outages.wait(cluster); ok {
		return reconcile.Result{RequeueAfter: d}, nil
	}
	if transient > 0 {
		if progress {
			return reconcile.Result{RequeueAfter: r.Opts.RetryBase}, nil
		}
		return reconcile.Result{}, fmt.Errorf("%w: %d objects of %s not written; retrying with backoff", errTransientWrites, transient, cluster)
	}
	after := r.jitter(r.Opts.ResyncPeriod)
	if d, ok := r.denials.nextRetry(cluster); ok && d < after {
		after = d + 100*time.Millisecond
	}
	if d, ok := r.contested.nextRelease(cluster); ok && d+100*time.Millisecond < after {
		after = d + 100*time.Millisecond
	}
	if settling && r.Opts.NodeSettle+50*time.Millisecond < after {
		// Nodes changed back right after a write: look again once nodelink
		// has had the time to catch up.
		after = r.Opts.NodeSettle + 50*time.Millisecond
	}
	if d := batchDue.Sub(r.now()); !batchDue.IsZero() && d > 0 && d+50*time.Millisecond < after {
		// The next batch is due in d: look again then. One already due waits
		// for an unfinished batch, whose writes, failures and holds requeue
		// the cluster by themselves, so it needs no timer.
		after = d + 50*time.Millisecond
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// errTransientWrites: some writes failed in a way a retry may fix.
var errTransientWrites = errors.New("transient write failures")

// syncCluster reads, decides, then writes.
//   - Decide, on the hub's objects alone, which pools are synced.
//   - Read the spoke (readSpoke): its connection and its cached objects.
//   - Decide what each target should hold (plan): the planner's targets,
//     NoExecute pacing, reclaims of what nodelink copied back, and holds of
//     contested targets. The drift report and the dry run plan the same way.
//   - Write (write): every pool's targets, bounded by WritesPerCluster; in
//     a write outage, one probe first (outage.go).
//   - Remember what the writes taught (remember): denials, contests,
//     nodelink's copy-backs, rollout Events, the write outage.
//
// It returns one PoolResult per pool, the cluster's state, and an error when
// the spoke could not be read (retried with backoff).
func (r *Reconciler) syncCluster(ctx context.Context, cd *hivev1.ClusterDeployment, pools []hivev1.MachinePool) ([]PoolResult, string, error) {
	ck := clusterKey(cd.Namespace, cd.Name)
	d := Decide(cd, pools, r.Opts.DryRun)
	ctx, cancel := context.WithTimeout(ctx, r.Opts.SyncTimeout)
	defer cancel()
	spoke, objs, err := r.readSpoke(ctx, cd, d)
	if spoke == nil {
		// Nothing is written (paused, ineligible, unreachable, unread): no
		// write outage either; a connected spoke's next sync tells anew.
		r.outages.note(ctx, ck, d, "")
		return d.Results, d.State, err
	}
	work := r.plan(ctx, ck, pools, d, objs)
	results, probe := r.write(ctx, ck, spoke, work)
	r.rememberJudged(ck, work, results)
	d.Finish(results)
	r.pacer.landed(ck, pools, d, work, results, r.now())
	r.outages.note(ctx, ck, d, probe)
	for i := range d.Results {
		if c := Count(d.Results[i].Results); c.Settling > 0 && c.Drifted == c.Settling {
			// Only Nodes that nodelink changed back a moment ago differ, and
			// they are written again within NodeSettle: no news for the status.
			d.Results[i].KeepStatus = true
		}
	}
	r.remember(ck, pools, d, work)
	return d.Results, d.State, nil
}

// readSpoke connects (Ensure) and reads the spoke's objects, when d has a
// pool to sync. Without a spoke to write to, it returns nil and completes d
// (paused, ineligible, unreachable), with an error when a connected spoke
// could not be read.
func (r *Reconciler) readSpoke(ctx context.Context, cd *hivev1.ClusterDeployment, d *Decision) (remote.Spoke, SpokeObjects, error) {
	key := types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}
	if d.State == StateIneligible {
		r.Spokes.Ensure(ctx, cd) // disconnects an ineligible cluster
	}
	if d.State == StatePaused || d.State == StateIneligible {
		return nil, SpokeObjects{}, nil
	}
	st := r.Spokes.Ensure(ctx, cd)
	r.noteConnection(cd, st)
	if !d.NeedsSpoke {
		return nil, SpokeObjects{}, nil
	}
	spoke, err := r.Spokes.GetSpoke(key)
	if err != nil {
		st = r.Spokes.Status(key)
		d.Unreachable(string(st.Reason), st.Message)
		if st.Reason == remote.ReasonConnecting {
			// The connect notification brings the cluster back; until then there is
			// nothing new to say about its pools.
			for i := range d.Results {
				d.Results[i].KeepStatus = true
			}
		}
		return nil, SpokeObjects{}, nil
	}
	objs, err := listSpoke(ctx, spoke, d, true)
	if err != nil {
		d.Unreachable(v1alpha1.ReasonReadFailed, err.Error())
		return nil, SpokeObjects{}, fmt.Errorf("read spoke: %w", err)
	}
	return spoke, objs, nil
}

// poolWork is what one synced pool's targets should hold. fp is the
// fingerprint of the pool's Desired, under which denials, contests and
// holds are remembered.
type poolWork struct {
	fp      string
	targets []targetWork
}

// targetWork is what one target of one pool should hold, and whether it is
// held (contested): then nothing is written to it.
type targetWork struct {
	desired nmsync.Desired
	target  nmsync.Target
	held    bool
}

// plan decides what every target of every synced pool should hold: the
// planner's targets, this round's NoExecute pacing (the live gate starts
// batches; a dry run starts none), what nodelink copied back to reclaim,
// and which targets are held after a contest. A pool that is not synced has
// no work (nil).
func (r *Reconciler) plan(ctx context.Context, ck string, pools []hivev1.MachinePool, d *Decision, objs SpokeObjects) []*poolWork {
	targets := d.Targets(objs)
	r.nodes.sweep(ck)
	now := r.now()
	gate := d.noNewBatch(now)
	if !r.Opts.DryRun {
		names := make([]string, len(pools))
		for i := range pools {
			names[i] = pools[i].Name
		}
		gate = r.pacer.gate(ck, names, d, now)
	}
	paced := d.Pace(targets, gate)
	judged, _ := r.judged.get(ck)
	work := make([]*poolWork, len(pools))
	for i := range pools {
		if d.Desired[i] == nil {
			continue
		}
		pw := &poolWork{fp: fingerprint(*d.Desired[i]), targets: make([]targetWork, len(targets[i]))}
		dropped := r.dropped(ctx, &pools[i], *d.Desired[i], now)
		for j, t := range targets[i] {
			desired := paced[i][j]
			desired.Dropped = dropped
			desired.Reclaim = r.nodes.reclaim(ck, t)
			desired.Judged = judged[t.Machine.UID] == judgedVersion(t)
			pw.targets[j] = targetWork{desired: desired, target: t, held: r.contested.isHeld(ck, pw.fp, t)}
		}
		work[i] = pw
	}
	return work
}

// write syncs every target of work to the spoke through the reconciler's
// writer, the outage path wrapping the plain one (outage.go), and returns the
// results per pool and target, with the target a write outage's probe wrote
// last, if any. A held target is planned as the drift report plans it, and
// nothing is written to it.
func (r *Reconciler) write(ctx context.Context, ck string, spoke remote.Spoke, work []*poolWork) ([][][]nmsync.Result, string) {
	b := &writeBatch{work: work, results: make([][][]nmsync.Result, len(work)), appliers: make([]*nmsync.Applier, len(work))}
	for i, pw := range work {
		if pw == nil {
			continue
		}
		b.results[i] = make([][]nmsync.Result, len(pw.targets))
		b.appliers[i] = &nmsync.Applier{Client: spoke, Reader: spoke.Live(), DryRun: r.Opts.DryRun,
			Hold: r.denials.hold(ck, pw.fp), Settle: r.nodes.holdBack(ck)}
		for j, w := range pw.targets {
			if w.held {
				b.results[i][j] = contestedResults(ctx, w.desired, w.target)
			}
		}
	}
	r.outages.write(ctx, ck, b)
	return b.results, b.probe
}

// writeBatch is one sync's writes to a spoke: the work, each synced pool's
// applier, and the results per pool and target, nil until the target is
// written or planned. probe is the target a write outage's probe wrote last.
type writeBatch struct {
	work     []*poolWork
	appliers []*nmsync.Applier
	results  [][][]nmsync.Result
	probe    string
}

// A writer writes the targets of a batch whose results are still nil.
type writer interface {
	write(ctx context.Context, ck string, b *writeBatch)
}

// plainWriter writes them all at once, limit (WritesPerCluster) at a time.
type plainWriter struct{ limit int }

func (p plainWriter) write(ctx context.Context, _ string, b *writeBatch) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.limit)
	for i, pw := range b.work {
		if pw == nil {
			continue
		}
		for j, w := range pw.targets {
			if b.results[i][j] != nil {
				continue // held after a contest, or probed
			}
			g.Go(func() error {
				b.results[i][j] = b.appliers[i].SyncTarget(gctx, w.desired, w.target)
				return nil
			})
		}
	}
	_ = g.Wait()
}

// dropped is what pool mp has dropped (Desired.Dropped), from its
// MachinePoolSync's status as the cache holds it (or as this controller last
// wrote it, if the cache lags), and d, what it declares now. Without a
// status of this pool (a new pool, one made again under the name of a
// deleted one whose MachinePoolSync is not collected yet, or the hub out of
// reach) it is nothing: no unrecorded item is judged.
func (r *Reconciler) dropped(ctx context.Context, mp *hivev1.MachinePool, d nmsync.Desired, now time.Time) map[string]time.Time {
	cur := &v1alpha1.MachinePoolSync{}
	if err := r.Hub.Get(ctx, client.ObjectKeyFromObject(mp), cur); err != nil || !madeFor(cur, mp) {
		return nil
	}
	st := cur.Status
	if last, ok := r.written.get(mp.Namespace + "/" + mp.Name); ok && last.resourceVersion != cur.ResourceVersion {
		st = last.status
	}
	return poolDropped(st, d, now)
}

// judgedVersion is what a Machine's judgement of its unrecorded items
// (Desired.Judged) holds for: the Machine's version and its MachineSet's, as
// listed. A change of either judges them again.
func judgedVersion(t nmsync.Target) string {
	v := t.Machine.ResourceVersion + "/"
	if t.MachineSet != nil {
		v += t.MachineSet.ResourceVersion
	}
	return v
}

// rememberJudged keeps, for the cluster's next sync, the Machines whose
// unrecorded items were judged and stay, at the version judged: those judged
// this time, and those still judged from before. Any other Machine (changed,
// or gone) is forgotten.
func (r *Reconciler) rememberJudged(ck string, work []*poolWork, results [][][]nmsync.Result) {
	next := map[types.UID]string{}
	for i, pw := range work {
		if pw == nil {
			continue
		}
		for j, w := range pw.targets {
			if j >= len(results[i]) || len(results[i][j]) == 0 {
				continue
			}
			m := results[i][j][0]
			if w.desired.Judged || (m.Judged && !slices.ContainsFunc(m.Changes, func(c nmsync.Change) bool { return c.Dropped })) {
				next[w.target.Machine.UID] = judgedVersion(w.target)
			}
		}
	}
	if len(next) == 0 {
		r.judged.delete(ck)
		return
	}
	r.judged.set(ck, next)
}

// remember records what the writes taught, per pool: what Node writes
// removed (nodelink may copy it back), denials and contests (with an Event
// when one starts), and a paced rollout's progress (with its Events).
func (r *Reconciler) remember(ck string, pools []hivev1.MachinePool, d *Decision, work []*poolWork) {
	for i, pw := range work {
		if pw == nil {
			continue
		}
		for _, res := range d.Results[i].Results {
			r.nodes.record(ck, res)
			if r.denials.record(ck, pools[i].Name, pw.fp, res) {
				r.Recorder.Eventf(&pools[i], nil, corev1.EventTypeWarning, EventDenied, eventAction,
					"%s %s: the spoke denied the patch; retrying in %s: %v", res.Kind, res.Name, r.Opts.DeniedRetry, res.Err)
			}
			if r.contested.record(ck, pools[i].Name, pw.fp, res) {
				r.Recorder.Eventf(&pools[i], nil, corev1.EventTypeWarning, EventContested, eventAction,
					"%s %s: another writer keeps undoing this pool's metadata; not writing it for %s", res.Kind, res.Name, r.Opts.ContestedWindow)
			}
		}
		r.reportRollout(&pools[i], ck, d.Results[i].Rollout)
	}
}

// contestedResults reports a target held after a contest: nothing is
// written, and each of its objects that differs from the pool (planned as
// the drift report plans it) counts as held, not delivered.
func contestedResults(ctx context.Context, d nmsync.Desired, t nmsync.Target) []nmsync.Result {
	out := (&nmsync.Applier{DryRun: true}).SyncTarget(ctx, d, t)
	for i := range out {
		if out[i].Outcome == nmsync.OutcomeWouldPatch {
			out[i].Outcome, out[i].Reason = nmsync.OutcomeSkipped, v1alpha1.ReasonContested
		}
	}
	return out
}

// listSpoke reads from a spoke what the planner reads for the pools d
// syncs (sync.Targets), and nothing else: their MachineSets, the Machines
// of those MachineSets, and those Machines' Nodes. A read from the cache
// builds each object anew, on every reconcile, so the control plane's
// Nodes and Machines, other pools' and those of MachineSets Hive does not
// manage are not built. nodesByName reads each Node by name (from the
// cache, a lookup); otherwise the Nodes are listed (live: one request, not
// one per Node).
func listSpoke(ctx context.Context, spoke client.Reader, d *Decision, nodesByName bool) (SpokeObjects, error) {
	var objs SpokeObjects
	var pools []string
	for i, desired := range d.Desired {
		if desired != nil {
			pools = append(pools, d.Results[i].PoolName)
		}
	}
	if len(pools) == 0 {
		return objs, nil
	}
	sel, err := labelIn(nmsync.LabelMachinePool, pools)
	if err != nil {
		return objs, err
	}
	ms := &machinev1beta1.MachineSetList{}
	if err := spoke.List(ctx, ms, client.InNamespace(nmsync.MachineAPINamespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return objs, fmt.Errorf("list MachineSets: %w", err)
	}
	objs.MachineSets = ms.Items
	names := make([]string, len(ms.Items))
	for i := range ms.Items {
		names[i] = ms.Items[i].Name
	}
	if len(names) == 0 {
		return objs, nil
	}
	if sel, err = labelIn(nmsync.LabelMachineSet, names); err != nil {
		return objs, err
	}
	m := &machinev1beta1.MachineList{}
	if err := spoke.List(ctx, m, client.InNamespace(nmsync.MachineAPINamespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return objs, fmt.Errorf("list Machines: %w", err)
	}
	objs.Machines = m.Items
	if !nodesByName {
		n := &corev1.NodeList{}
		if err := spoke.List(ctx, n); err != nil {
			return objs, fmt.Errorf("list Nodes: %w", err)
		}
		objs.Nodes = n.Items
		return objs, nil
	}
	seen := make(map[string]bool, len(m.Items))
	// Each Node is read into its place in a slice made once at its most: a Node is a large
	// struct, and read into a variable of its own first it was one more copy on the heap per
	// Node, and the slice's growth more, held while the reconcile writes (with 20 clusters
	// adopted at once, these are a large share of the controller's heap).
	objs.Nodes = make([]corev1.Node, 0, len(m.Items))
	for i := range m.Items {
		ref := m.Items[i].Status.NodeRef
		if ref == nil || ref.Name == "" || seen[ref.Name] {
			continue
		}
		seen[ref.Name] = true
		objs.Nodes = append(objs.Nodes, corev1.Node{})
		if err := spoke.Get(ctx, client.ObjectKey{Name: ref.Name}, &objs.Nodes[len(objs.Nodes)-1]); err != nil {
			objs.Nodes = objs.Nodes[:len(objs.Nodes)-1]
			if apierrors.IsNotFound(err) {
				continue // the planner reports it (sync.NodeSkipNotFound)
			}
			return objs, fmt.Errorf("get Node %s: %w", ref.Name, err)
		}
	}
	return objs, nil
}

// labelIn selects the objects whose label key has one of values. Values that
// are not valid label values are left out, as no object can carry them;
// with none left, nothing matches.
func labelIn(key string, values []string) (labels.Selector, error) {
	valid := make([]string, 0, len(values))
	for _, v := range values {
		if len(validation.IsValidLabelValue(v)) == 0 {
			valid = append(valid, v)
		}
	}
	if len(valid) == 0 {
		return labels.Nothing(), nil
	}
	req, err := labels.NewRequirement(key, selection.In, valid)
	if err != nil {
		return nil, fmt.Errorf("select %s: %w", key, err)
	}
	return labels.NewSelector().Add(*req), nil
}

func (r *Reconciler) listPools(ctx context.Context, cd *hivev1.ClusterDeployment) ([]hivev1.MachinePool, error) {
	list := &hivev1.MachinePoolList{}
	if err := r.Hub.List(ctx, list, client.InNamespace(cd.Namespace), client.MatchingFields{indexPoolByCluster: cd.Name}); err != nil {
		return nil, fmt.Errorf("list MachinePools: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// jitter spreads resyncs over ±10% of d.
func (r *Reconciler) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}
