package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// writeStatus creates or updates the pool's MachinePoolSync only when what it
// says changes: a sync that finds the pool as its status describes it writes
// nothing (freshness is the cluster_last_sync_timestamp_seconds metric). It
// reports whether it wrote: a write that failed did not, so what is said once
// per status change (a refusal's Event) waits for the retry that writes it.
// The current status is read from the cache (from the hub when the cache has
// not seen the object a create finds there).
//
// It also times pool changes (pool_propagation_seconds): one made while no
// replica watched (a restart, a failover), which the status shows as an older
// observedGeneration, counts as seen when this sync began (syncStart); and a
// status that says a timed change holds is observed once it is written.
func (r *Reconciler) writeStatus(ctx context.Context, mp *hivev1.MachinePool, st v1alpha1.MachinePoolSyncStatus, changed bool, now metav1.Time, syncStart time.Time) (_ bool, err error) {
	key := mp.Namespace + "/" + mp.Name
	changedAt := now
	if u, ok := r.unsaid.get(key); ok && !changed && u.uid == mp.UID {
		// A change whose status write failed: said now, with its own time and
		// the objects its sync patched. Not by a pool made again under its name.
		changed, changedAt, st.Patched = true, u.at, u.patched
	}
	defer func() {
		if err == nil {
			r.unsaid.delete(key)
		} else if changed {
			r.unsaid.set(key, unsaidChange{at: changedAt, patched: st.Patched, uid: mp.UID})
		}
	}()
	cur := &v1alpha1.MachinePoolSync{}
	created, live := false, false // live: read from the hub, not the cache
	err = r.Hub.Get(ctx, client.ObjectKeyFromObject(mp), cur)
	if apierrors.IsNotFound(err) {
		created = true
		cur = &v1alpha1.MachinePoolSync{ObjectMeta: metav1.ObjectMeta{
			Namespace: mp.Namespace, Name: mp.Name,
			Labels: map[string]string{nmsync.LabelClusterDeploymentName: mp.Spec.ClusterDeploymentRef.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: hivev1.SchemeGroupVersion.String(), Kind: "MachinePool", Name: mp.Name, UID: mp.UID,
			}},
		}}
		err := r.Hub.Create(ctx, cur)
		if apierrors.IsAlreadyExists(err) && r.Live != nil {
			// The cache has not seen its create yet (ours, a sync ago: the events of our
			// own spoke writes can bring the cluster back sooner than the hub's watch
			// brings the object). Read it from the hub, and write the status over it.
			created, live = false, true
			cur = &v1alpha1.MachinePoolSync{}
			if err := r.Live.Get(ctx, client.ObjectKeyFromObject(mp), cur); err != nil {
				return false, fmt.Errorf("read from the hub (the cache lacks it): %w", err)
			}
		} else if err != nil {
			return false, fmt.Errorf("create: %w", err)
		}
	} else if err != nil {
		return false, err
	}
	old := cur.Status
	last, wrote := r.written.get(key)
	if wrote && last.resourceVersion != cur.ResourceVersion && !created && !live {
		// The cache has not caught up with our last write yet: compare with what
		// that write said, so a lagging cache costs no second write.
		old = last.status
	}
	if !created && !r.Opts.DryRun && old.ObservedGeneration > 0 && old.ObservedGeneration < st.ObservedGeneration {
		r.propagation.seen(key, st.ObservedGeneration, syncStart) // no-op when its update event was seen
	}
	st.Conditions = Conditions(st, old.Conditions, now)
	ours := old
	if !madeFor(cur, mp) {
		// A deleted pool's, not collected yet: what it declared and dropped
		// is not this pool's.
		ours.Declared, ours.Dropped = nil, nil
	}
	st.Declared, st.Dropped = ours.Declared, ours.Dropped
	if d, _, err := nmsync.DesiredFromPool(mp.Spec); err == nil {
		st.Declared, st.Dropped = d.Items(), droppedList(poolDropped(ours, d, now.Time))
	}
	if !created && !changed && sameSummary(old, st) {
		r.propagation.delivered(key, st, now.Time, r.Metrics.Propagation)
		return false, nil
	}
	st.LastSyncTime = old.LastSyncTime
	st.LastChangeTime = old.LastChangeTime
	if changed {
		st.LastChangeTime = &changedAt
	}
	if st.Phase == v1alpha1.PhaseInSync || st.Phase == v1alpha1.PhaseDrifted || st.Phase == v1alpha1.PhaseRefused {
		st.LastSyncTime = &now
	}
	base := cur.DeepCopy()
	cur.Status = st
	if created || old.Phase == "" {
		// The first status is written whole: its counts are required fields, which a
		// merge patch leaves out when they are 0. So is a status never written (its
		// create's first write failed), unless a lagging cache hides ours (old).
		if err := r.Hub.Status().Update(ctx, cur); err != nil {
			return false, fmt.Errorf("update status: %w", err)
		}
	} else if err := r.Hub.Status().Patch(ctx, cur, client.MergeFrom(base)); err != nil {
		// Then merge patches, not Updates: a cached copy one write behind must
		// not cost a conflict and a retry.
		return false, fmt.Errorf("patch status: %w", err)
	}
	r.written.set(key, writtenStatus{status: cur.Status, resourceVersion: cur.ResourceVersion})
	// Timed once the status says it: a failed write leaves the clock running.
	r.propagation.delivered(key, st, now.Time, r.Metrics.Propagation)
	return true, nil
}

// madeFor reports whether a MachinePoolSync is mp's: its owner is mp (by
// UID), not a deleted pool of the same name.
func madeFor(mps *v1alpha1.MachinePoolSync, mp *hivev1.MachinePool) bool {
	return slices.ContainsFunc(mps.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == mp.UID })
}

// poolDropped is what a pool has dropped as of now (nmsync.NextDropped):
// from what its status says it declared and dropped, and d, what it declares.
func poolDropped(old v1alpha1.MachinePoolSyncStatus, d nmsync.Desired, now time.Time) map[string]time.Time {
	dropped := make(map[string]time.Time, len(old.Dropped))
	for _, it := range old.Dropped {
		dropped[it.Item] = it.Time.Time
	}
	return nmsync.NextDropped(old.Declared, dropped, d, now)
}

// droppedList is Status.Dropped for dropped, sorted by item.
func droppedList(dropped map[string]time.Time) []v1alpha1.DroppedItem {
	var out []v1alpha1.DroppedItem
	for _, item := range slices.Sorted(maps.Keys(dropped)) {
		out = append(out, v1alpha1.DroppedItem{Item: item, Time: metav1.NewTime(dropped[item])})
	}
	return out
}

// unsaidChange is a change whose status write failed: when its sync ran, how
// many objects it patched, and the pool it was made for.
type unsaidChange struct {
	at      metav1.Time
	patched int
	uid     types.UID
}

// writtenStatus is a status this controller wrote.
type writtenStatus struct {
	status          v1alpha1.MachinePoolSyncStatus
	resourceVersion string
}

// sameSummary reports whether two statuses say the same, leaving aside their
// times and the last batch's Patched count. Semantic equality compares the
// rollout's next batch time as an instant, whatever its location.
func sameSummary(a, b v1alpha1.MachinePoolSyncStatus) bool {
	a.LastSyncTime, a.LastChangeTime, a.Patched = nil, nil, 0
	b.LastSyncTime, b.LastChangeTime, b.Patched = nil, nil, 0
	return equality.Semantic.DeepEqual(a, b)
}

// reportOrphans marks the pools that name a ClusterDeployment that does not
// exist: nothing can be synced for them, and people should know why.
func (r *Reconciler) reportOrphans(ctx context.Context, key types.NamespacedName) error {
	list := &hivev1.MachinePoolList{}
	if err := r.Hub.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingFields{indexPoolByCluster: key.Name}); err != nil {
		return fmt.Errorf("list MachinePools: %w", err)
	}
	now := metav1.NewTime(r.now())
	for i := range list.Items {
		mp := &list.Items[i]
		if !mp.DeletionTimestamp.IsZero() {
			continue
		}
		msg := fmt.Sprintf("spec.clusterDeploymentRef names ClusterDeployment %s, which does not exist", key)
		st := Status(PoolResult{Cluster: key.String(), PoolName: mp.Spec.Name, Generation: mp.Generation,
			Phase: v1alpha1.PhaseUnreachable, Reason: v1alpha1.ReasonClusterDeploymentMissing, Message: msg})
		news, err := r.writeStatus(ctx, mp, st, false, now, now.Time)
		if err != nil {
			return err
		}
		if news {
			r.Recorder.Eventf(mp, nil, corev1.EventTypeWarning, EventClusterMissing, eventAction, "%s", msg)
		}
	}
	return nil
}

// retryStatus folds the status writes that failed (err) into when the
// cluster is looked at again (after, nextErr: what next decided). Nothing
// else would bring the cluster back: the spoke is in sync, and the hub's
// objects did not change.
//   - A write the hub refused (400, 403 or 422: validation, RBAC, an
//     admission webhook) goes back to the controller's backoff, RetryBase
//     doubling to RetryCap, as an error: reported, never hot-looped.
//   - Any other failure (the hub restarting, a 5xx, a timeout, a hub webhook
//     that cannot be called) is retried on a backoff of its own, RetryBase
//     doubling to OutageProbeInterval (RetryCap with probes off), or sooner
//     if next says so; a sync whose statuses are all written resets it. So,
//     as a spoke's write outage, a hub's ends with the statuses written
//     within an interval, however long it lasted. Only clusters whose
//     status changed meanwhile retry, each one write an interval; if a whole
//     shard's did, the hub client's rate limit paces them.
func (r *Reconciler) retryStatus(ctx context.Context, cluster string, err error, after reconcile.Result, nextErr error) (reconcile.Result, error) {
	if err == nil {
		r.statusRetry.Forget(cluster)
		return after, nextErr
	}
	logger := log.FromContext(ctx)
	if !anyTransient(err) {
		r.Metrics.StatusWriteFailures.WithLabelValues(statusWriteRefused).Inc()
		return reconcile.Result{}, errors.Join(nextErr, fmt.Errorf("the hub refused a status write: %w", err))
	}
	r.Metrics.StatusWriteFailures.WithLabelValues(statusWriteTransient).Inc()
	tries := r.statusRetry.NumRequeues(cluster)
	d := r.statusRetry.When(cluster)
	if tries == 0 {
		logger.Error(err, "status not written; retrying", "after", d)
	} else {
		// Said once when it begins; the retries are counted, not logged as errors.
		logger.V(1).Info("status not written; retrying", "after", d, "tries", tries+1, "error", err.Error())
	}
	if nextErr == nil && (after.RequeueAfter <= 0 || d < after.RequeueAfter) {
		after.RequeueAfter = d
	}
	return after, nextErr
}

// statusBackoff spaces the retries of a cluster's status writes that failed
// transiently (retryStatus).
type statusBackoff struct {
	workqueue.TypedRateLimiter[string]
}

func (b *statusBackoff) forget(c types.NamespacedName) { b.Forget(c.String()) }

// anyTransient reports whether any of the errors joined in err is one a retry
// may fix (see nmsync.IsDenied).
func anyTransient(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return slices.ContainsFunc(j.Unwrap(), anyTransient)
	}
	return !nmsync.IsDenied(err)
}
