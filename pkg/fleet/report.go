package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/pkg/remote"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// reportRollout says, with Events, that a paced NoExecute rollout started,
// took a batch, or ended. Nothing is said in a dry run, which starts none.
func (r *Reconciler) reportRollout(mp *hivev1.MachinePool, ck string, ro *Rollout) {
	if r.Opts.DryRun {
		return
	}
	// Ended only when every paced target is Done on the spoke: a last batch
	// whose writes failed, or that the cache does not show yet, is not.
	ended := ro == nil && r.pacer.finished(ck, mp.Name)
	reasons, messages := rolloutEvents(ro, ended)
	for i, reason := range reasons {
		r.Recorder.Eventf(mp, nil, corev1.EventTypeNormal, reason, eventAction, "%s", messages[i])
	}
	if ro != nil && r.pacer.noteHold(ck, mp.Name, ro.Hold) {
		// Said when a hold begins or changes, not on every sync it lasts.
		r.Recorder.Eventf(mp, nil, corev1.EventTypeWarning, EventNoExecuteHeld, eventAction, "%s: %s", ro.TaintList(), ro.Hold.Message)
	}
}

// noteConnection emits an Event on the ClusterDeployment when the spoke's
// connection reason changes to an error or back to connected.
func (r *Reconciler) noteConnection(cd *hivev1.ClusterDeployment, st remote.Status) {
	ck := clusterKey(cd.Namespace, cd.Name)
	prev, seen := r.lastConn.swap(ck, st.Reason)
	if seen && prev == st.Reason {
		return
	}
	switch {
	case st.Connected && seen && prev != remote.ReasonConnecting && prev != "":
		// Back after a reported outage. A first connect (a restart) is no news.
		r.Recorder.Eventf(cd, nil, corev1.EventTypeNormal, EventConnected, "Connect", "connected to the spoke")
	case !st.Connected && st.Reason != remote.ReasonConnecting && st.Reason != "":
		r.Recorder.Eventf(cd, nil, corev1.EventTypeWarning, EventDisconnected, "Connect", "%s: %s", st.Reason, st.Message)
	}
}

// report writes the MachinePoolSync statuses, Events and metrics of a sync
// that began at start. It returns the status writes that failed, joined
// (retryStatus decides when they are tried again). Each pool's counters and
// gauges come before its status: whoever reads the status then scrapes sees
// figures at least as new as it. What is said once per status change waits
// for the status write that says it.
func (r *Reconciler) report(ctx context.Context, cd *hivev1.ClusterDeployment, pools []hivev1.MachinePool, res []PoolResult, state string, start time.Time) error {
	var failed []error
	ck := clusterKey(cd.Namespace, cd.Name)
	now := metav1.NewTime(r.now())
	r.Metrics.SetState(ck, state)
	if state == StateInSync || state == StateDrifting || state == StateRefused {
		r.Metrics.LastSync.WithLabelValues(ck).Set(float64(now.UnixMilli()) / 1e3) // to the millisecond, as Prometheus keeps time
	}
	seen := map[string]bool{}
	for i := range pools {
		mp, pr := &pools[i], res[i]
		seen[mp.Name] = true
		c := Count(pr.Results)
		r.countWrites(ctx, mp, pr.Results, c)
		r.setPoolGauges(ck, mp, pr, c)
		r.setPending(ck, mp.Name, pr.Rollout)
		news, err := r.reportStatus(ctx, mp, pr, c, now, start)
		if err != nil {
			failed = append(failed, err)
		}
		r.statusEvents(ctx, mp, pr, news)
		r.appliedEvent(ctx, mp, pr, c)
		r.failedEvent(ctx, mp, pr, c)
	}
	r.forgetGonePools(cd, seen)
	return errors.Join(failed...)
}

// countWrites adds a pool's sync to the counters: objects by kind and
// result, conflicts, overrides, and labels the pool no longer declares that
// were kept because someone else set them too (each logged).
func (r *Reconciler) countWrites(ctx context.Context, mp *hivev1.MachinePool, results []nmsync.Result, c Counts) {
	logger := log.FromContext(ctx)
	for k, n := range c.PatchesByResult {
		if k[1] != string(nmsync.OutcomeInSync) {
			r.Metrics.Patches.WithLabelValues(k[0], k[1]).Add(float64(n))
		}
	}
	for _, rr := range results {
		if rr.Conflicts > 0 {
			r.Metrics.Conflicts.WithLabelValues(rr.Kind).Add(float64(rr.Conflicts))
		}
		for _, ch := range rr.Changes {
			if rr.Outcome != nmsync.OutcomePatched {
				continue
			}
			switch ch.Op {
			case nmsync.OpOverride:
				r.Metrics.Overrides.WithLabelValues(rr.Kind).Inc()
			case nmsync.OpRelease:
				r.Metrics.SharedKept.WithLabelValues(rr.Kind).Inc()
				logger.Info("kept a label the pool no longer declares: someone else set it too", "pool", mp.Name, "kind", rr.Kind, "object", rr.Name, "label", ch.Key, "setBy", ch.With)
			}
		}
	}
}

// setPoolGauges publishes a pool's drifted objects by kind, its denied and
// contested ones, and whether it is refused, and why.
func (r *Reconciler) setPoolGauges(ck string, mp *hivev1.MachinePool, pr PoolResult, c Counts) {
	for _, kind := range []string{nmsync.ResultKindMachine, nmsync.ResultKindNode} {
		r.Metrics.Drifted.WithLabelValues(ck, mp.Name, kind).Set(float64(c.DriftedByKind[kind]))
	}
	r.Metrics.Denied.WithLabelValues(ck, mp.Name).Set(float64(c.Denied))
	r.contested.setGauge(r.Metrics, ck, mp.Name)
	r.Metrics.PoolRefused.DeletePartialMatch(map[string]string{"cluster": ck, "pool": mp.Name})
	if pr.Phase == v1alpha1.PhaseRefused {
		r.Metrics.PoolRefused.WithLabelValues(ck, mp.Name, pr.Reason).Set(1)
	}
}

// reportStatus writes the pool's MachinePoolSync, unless the sync has
// nothing new to say of it (KeepStatus), and reports whether it wrote.
func (r *Reconciler) reportStatus(ctx context.Context, mp *hivev1.MachinePool, pr PoolResult, c Counts, now metav1.Time, start time.Time) (bool, error) {
	if pr.KeepStatus {
		return false, nil
	}
	news, err := r.writeStatus(ctx, mp, Status(pr), c.Patched > 0, now, start)
	if err != nil {
		return news, fmt.Errorf("MachinePoolSync %s: %w", mp.Name, err)
	}
	return news, nil
}

// statusEvents says, when the pool's status changed (news), what is said
// once per change, not on every resync: items of the pool ignored or
// corrected, and a refusal (an Event is a hub write).
func (r *Reconciler) statusEvents(ctx context.Context, mp *hivev1.MachinePool, pr PoolResult, news bool) {
	if !news {
		return
	}
	logger := log.FromContext(ctx)
	if len(pr.Warnings) > 0 {
		for _, w := range pr.Warnings {
			logger.Info("pool item ignored or corrected", "pool", mp.Name, "warning", w)
		}
		r.Recorder.Eventf(mp, nil, corev1.EventTypeWarning, EventPoolWarning, eventAction, "%s", strings.Join(pr.Warnings, "; "))
	}
	if pr.Phase == v1alpha1.PhaseRefused {
		r.Metrics.Refusals.WithLabelValues(pr.Reason).Inc()
		logger.Error(errors.New(pr.Message), "pool refused: nothing written", "pool", mp.Name, "reason", pr.Reason)
		r.Recorder.Eventf(mp, nil, corev1.EventTypeWarning, EventRefused, eventAction, "nothing written: %s", pr.Message)
	}
}

// appliedEvent says what the sync patched in the pool, or in a dry run
// would patch.
func (r *Reconciler) appliedEvent(ctx context.Context, mp *hivev1.MachinePool, pr PoolResult, c Counts) {
	summary := ChangeSummary(pr.Results)
	if summary == "" {
		return
	}
	switch {
	case r.Opts.DryRun:
		r.Recorder.Eventf(mp, nil, corev1.EventTypeNormal, EventWouldApply, eventAction, "dry run, would patch %s", summary)
	case c.Overrides > 0:
		r.Recorder.Eventf(mp, nil, corev1.EventTypeWarning, EventOverrode, eventAction, "patched %s", summary)
	default:
		r.Recorder.Eventf(mp, nil, corev1.EventTypeNormal, EventApplied, eventAction, "patched %s", summary)
	}
	log.FromContext(ctx).Info("pool synced", "pool", mp.Name, "patched", c.Patched, "drifted", c.Drifted, "requests", c.Requests, "conflicts", c.Conflicts, "dryRun", r.Opts.DryRun)
}

// setPending publishes the Nodes a pool's paced rollout has not reached,
// by why they wait.
func (r *Reconciler) setPending(ck, pool string, ro *Rollout) {
	if ro == nil || len(ro.Waiting) == 0 {
		// A series only while a rollout waits: a fleet at rest scrapes none.
		r.Metrics.NoExecutePending.DeletePartialMatch(map[string]string{"cluster": ck, "pool": pool})
		return
	}
	why := pendingPaced
	switch ro.Hold.Reason {
	case v1alpha1.ReasonNodesNotReady:
		why = pendingNodesNotReady
	case v1alpha1.ReasonOutsideWindow:
		why = pendingOutsideWindow
	}
	for _, other := range []string{pendingPaced, pendingNodesNotReady, pendingOutsideWindow} {
		if other != why { // the reason may have changed; the series stays if not
			r.Metrics.NoExecutePending.DeleteLabelValues(ck, pool, other)
		}
	}
	r.Metrics.NoExecutePending.WithLabelValues(ck, pool, why).Set(float64(len(ro.Waiting)))
}

// failedEvent says that writes of the pool failed transiently and are
// retried. Denials have their own Event when they happen; objects held
// after one are in the status, not repeated on every sync. A write outage
// is said once, when it begins, not on every failed probe.
func (r *Reconciler) failedEvent(ctx context.Context, mp *hivev1.MachinePool, pr PoolResult, c Counts) {
	if c.Transient == 0 || pr.OutageReported {
		return
	}
	msg := firstTransient(pr.Results)
	log.FromContext(ctx).Error(errors.New(msg), "pool sync incomplete; retrying", "pool", mp.Name, "failed", c.Transient)
	r.Recorder.Eventf(mp, nil, corev1.EventTypeWarning, EventSyncFailed, eventAction, "%d objects not synced, retrying: %s", c.Transient, msg)
}

// forgetGonePools forgets the pools of the cluster's last sync that this
// one did not see (seen): their series, their rollouts, their propagation
// clocks and what was last written and left unsaid in their statuses.
func (r *Reconciler) forgetGonePools(cd *hivev1.ClusterDeployment, seen map[string]bool) {
	ck := clusterKey(cd.Namespace, cd.Name)
	prev, _ := r.lastPools.swap(ck, seen)
	for p := range prev {
		if !seen[p] {
			r.Metrics.ForgetPool(ck, p)
			r.pacer.forgetPool(ck, p)
			r.propagation.forgetPool(cd.Namespace + "/" + p)
			r.written.delete(cd.Namespace + "/" + p)
			r.unsaid.delete(cd.Namespace + "/" + p)
		}
	}
}
