package fleet

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
)

// conditionOf is one condition's status, reason and message, before times.
type conditionOf struct {
	status          metav1.ConditionStatus
	reason, message string
}

// Conditions derives a status's Ready, Progressing and Degraded conditions
// from its phase and reason, starting from the conditions it had (old): a
// condition whose status does not change keeps its lastTransitionTime, so
// a sync that finds the pool as before yields the same conditions and
// writes nothing. now stamps the transitions.
func Conditions(st v1alpha1.MachinePoolSyncStatus, old []metav1.Condition, now metav1.Time) []metav1.Condition {
	ready, progressing, degraded := judge(st)
	out := make([]metav1.Condition, 0, 3)
	for _, c := range old {
		// Copies: meta.SetStatusCondition edits in place, and old belongs to
		// the cache.
		if c.Type == v1alpha1.ConditionReady || c.Type == v1alpha1.ConditionProgressing || c.Type == v1alpha1.ConditionDegraded {
			out = append(out, c)
		}
	}
	for _, c := range []struct {
		kind string
		of   conditionOf
	}{{v1alpha1.ConditionReady, ready}, {v1alpha1.ConditionProgressing, progressing}, {v1alpha1.ConditionDegraded, degraded}} {
		meta.SetStatusCondition(&out, metav1.Condition{
			Type: c.kind, Status: c.of.status, Reason: c.of.reason, Message: truncate(c.of.message, 32768),
			ObservedGeneration: st.ObservedGeneration, LastTransitionTime: now,
		})
	}
	return out
}

// judge maps a phase and reason to the three conditions.
func judge(st v1alpha1.MachinePoolSyncStatus) (ready, progressing, degraded conditionOf) {
	reason := st.Reason
	if reason == "" {
		reason = st.Phase
	}
	msg := st.Message
	switch {
	case msg != "":
	case st.Total > 0:
		msg = fmt.Sprintf("%s: %d of %d targeted objects hold generation %d", st.Phase, st.Synced, st.Total, st.ObservedGeneration)
	default:
		msg = fmt.Sprintf("%s (generation %d)", reason, st.ObservedGeneration)
	}
	ready = conditionOf{metav1.ConditionFalse, reason, msg}
	progressing = conditionOf{metav1.ConditionFalse, v1alpha1.ReasonIdle, "no change under way"}
	degraded = conditionOf{metav1.ConditionFalse, v1alpha1.ReasonAsExpected, "nothing needs a person"}
	switch st.Phase {
	case v1alpha1.PhaseInSync:
		ready = conditionOf{metav1.ConditionTrue, v1alpha1.ReasonInSync,
			fmt.Sprintf("generation %d holds on all %d targeted objects", st.ObservedGeneration, st.Total)}
	case v1alpha1.PhaseRollingOut:
		progressing = conditionOf{metav1.ConditionTrue, reason, msg}
	case v1alpha1.PhaseDrifted:
		switch st.Reason {
		case v1alpha1.ReasonWriteDenied:
			degraded = conditionOf{metav1.ConditionTrue, reason, msg}
		case v1alpha1.ReasonDryRun:
			// Nothing is under way: a dry run only reports.
		default:
			progressing = conditionOf{metav1.ConditionTrue, v1alpha1.ReasonWriteRetried, msg}
		}
	case v1alpha1.PhaseRefused, v1alpha1.PhaseUnreachable, v1alpha1.PhaseContested:
		degraded = conditionOf{metav1.ConditionTrue, reason, msg}
	}
	return ready, progressing, degraded
}
