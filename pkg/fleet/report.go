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
// (retryStatus decides when they are tried again).
func (r *Reconciler) report(ctx context.Context, cd *hivev1.ClusterDeployment, pools []hivev1.MachinePool, res []PoolResult, state string, start time.Time) error {
	logger := log.FromContext(ctx)
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
		for k, n := range c.PatchesByResult {
			if k[1] != string(nmsync.OutcomeInSync) {
				r.Metrics.Patches.WithLabelValues(k[0], k[1]).Add(float64(n))
			}
		}
		for _, rr := range pr.Results {
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
		for _, kind := range []string{nmsync.ResultKindMachine, nmsync.ResultKindNode} {
			r.Metrics.Drifted.WithLabelValues(ck, mp.Name, kind).Set(float64(c.DriftedByKind[kind]))
		}
		// Gauges before the status: whoever reads the status then scrapes
		// sees figures at least as new as it.
		r.Metrics.Denied.WithLabelValues(ck, mp.Name).Set(float64(c.Denied))
		r.contested.setGauge(r.Metrics, ck, mp.Name)
		r.Metrics.PoolRefused.DeletePartialMatch(map[string]string{"cluster": ck, "pool": mp.Name})
		if pr.Phase == v1alpha1.PhaseRefused {
			r.Metrics.PoolRefused.WithLabelValues(ck, mp.Name, pr.Reason).Set(1)
		}
		st := Status(pr)
		news := false
		if !pr.KeepStatus {
			var err error
			if news, err = r.writeStatus(ctx, mp, st, c.Patched > 0, now, start); err != nil {
				failed = append(failed, fmt.Errorf("MachinePoolSync %s: %w", mp.Name, err))
			}
		}
		if news && len(pr.Warnings) > 0 {
			// Said when the status changes, not on every resync.
			for _, w := range pr.Warnings {
				logger.Info("pool item ignored or corrected", "pool", mp.Name, "warning", w)
			}
			r.Recorder.Eventf(mp, nil, corev1.EventTypeWarning, EventPoolWarning, eventAction, "%s", strings.Join(pr.Warnings, "; "))
		}
		if pr.Phase == v1alpha1.PhaseRefused && news {
			// Said once per refusal, not on every resync: an Event is a hub write.
			r.Metrics.Refusals.WithLabelValues(pr.Reason).Inc()
			logger.Error(errors.New(pr.Message), "pool refused: nothing written", "pool", mp.Name, "reason", pr.Reason)
			r.Recorder.Eventf(mp, nil, corev1.EventTypeWarning, EventRefused, eventAction, "nothing written: %s", pr.Message)
		}

		if summary := ChangeSummary(pr.Results); summary != "" {
			switch {
			case r.Opts.DryRun:
				r.Recorder.Eventf(mp, nil, corev1.EventTypeNormal, EventWouldApply, eventAction, "dry run, would patch %s", summary)
			case c.Overrides > 0:
				r.Recorder.Eventf(mp, nil, corev1.EventTypeWarning, EventOverrode, eventAction, "patched %s", summary)
			default:
				r.Recorder.Eventf(mp, nil, corev1.EventTypeNormal, EventApplied, eventAction, "patched %s", summary)
			}
			logger.Info("pool synced", "pool", mp.Name, "patched", c.Patched, "drifted", c.Drifted, "requests", c.Requests, "conflicts", c.Conflicts, "dryRun", r.Opts.DryRun)
		}
		pending := map[string]string{"cluster": ck, "pool": mp.Name}
		if ro := pr.Rollout; ro != nil && len(ro.Waiting) > 0 {
			why := pendingPaced
			switch ro.Hold.Reason {
			case v1alpha1.ReasonNodesNotReady:
				why = pendingNodesNotReady
			case v1alpha1.ReasonOutsideWindow:
				why = pendingOutsideWindow
			}
			for _, other := range []string{pendingPaced, pendingNodesNotReady, pendingOutsideWindow} {
				if other != why { // the reason may have changed; the series stays if not
					r.Metrics.NoExecutePending.DeleteLabelValues(ck, mp.Name, other)
				}
			}
			r.Metrics.NoExecutePending.WithLabelValues(ck, mp.Name, why).Set(float64(len(ro.Waiting)))
		} else {
			// A series only while a rollout waits: a fleet at rest scrapes none.
			r.Metrics.NoExecutePending.DeletePartialMatch(pending)
		}
		if c.Transient > 0 && !pr.OutageReported {
			// Denials have their own Event when they happen; objects held after
			// one are in the status, not repeated on every sync. A write outage
			// is said once, when it begins, not on every failed probe.
			msg := firstTransient(pr.Results)
			logger.Error(errors.New(msg), "pool sync incomplete; retrying", "pool", mp.Name, "failed", c.Transient)
			r.Recorder.Eventf(mp, nil, corev1.EventTypeWarning, EventSyncFailed, eventAction, "%d objects not synced, retrying: %s", c.Transient, msg)
		}
	}

	prev, _ := r.lastPools.swap(ck, seen)
	for p := range prev {
		if !seen[p] {
			r.Metrics.ForgetPool(ck, p)
			r.pacer.forgetPool(ck, p)
			r.propagation.forgetPool(cd.Namespace + "/" + p)
		}
	}
	return errors.Join(failed...)
}
