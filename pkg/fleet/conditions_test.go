package fleet

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
)

func TestConditionsFollowThePhase(t *testing.T) {
	type want struct{ ready, progressing, degraded metav1.ConditionStatus }
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	cases := []struct {
		phase, reason string
		want          want
		readyReason   string
	}{
		{v1alpha1.PhaseInSync, "", want{T, F, F}, v1alpha1.ReasonInSync},
		{v1alpha1.PhaseRollingOut, v1alpha1.ReasonNoExecutePaced, want{F, T, F}, v1alpha1.ReasonNoExecutePaced},
		{v1alpha1.PhaseDrifted, v1alpha1.ReasonWriteFailed, want{F, T, F}, v1alpha1.ReasonWriteFailed},
		{v1alpha1.PhaseDrifted, v1alpha1.ReasonWriteDenied, want{F, F, T}, v1alpha1.ReasonWriteDenied},
		{v1alpha1.PhaseDrifted, v1alpha1.ReasonDryRun, want{F, F, F}, v1alpha1.ReasonDryRun},
		{v1alpha1.PhaseRefused, "ReservedKey", want{F, F, T}, "ReservedKey"},
		{v1alpha1.PhaseUnreachable, "Timeout", want{F, F, T}, "Timeout"},
		{v1alpha1.PhaseContested, v1alpha1.ReasonContested, want{F, F, T}, v1alpha1.ReasonContested},
		{v1alpha1.PhasePaused, v1alpha1.ReasonPoolPaused, want{F, F, F}, v1alpha1.ReasonPoolPaused},
	}
	now := metav1.NewTime(time.Unix(1000, 0))
	for _, c := range cases {
		st := v1alpha1.MachinePoolSyncStatus{Phase: c.phase, Reason: c.reason, ObservedGeneration: 7, Total: 4, Synced: 2}
		conds := Conditions(st, nil, now)
		if len(conds) != 3 {
			t.Fatalf("%s/%s: %d conditions, want 3", c.phase, c.reason, len(conds))
		}
		got := want{
			meta.FindStatusCondition(conds, v1alpha1.ConditionReady).Status,
			meta.FindStatusCondition(conds, v1alpha1.ConditionProgressing).Status,
			meta.FindStatusCondition(conds, v1alpha1.ConditionDegraded).Status,
		}
		if got != c.want {
			t.Errorf("%s/%s: Ready, Progressing, Degraded = %v, want %v", c.phase, c.reason, got, c.want)
		}
		for _, cond := range conds {
			if cond.ObservedGeneration != 7 || cond.Reason == "" || cond.Message == "" || !cond.LastTransitionTime.Equal(&now) {
				t.Errorf("%s/%s: %+v: want observedGeneration 7, a reason, a message, the transition time", c.phase, c.reason, cond)
			}
		}
		if r := meta.FindStatusCondition(conds, v1alpha1.ConditionReady).Reason; r != c.readyReason {
			t.Errorf("%s/%s: Ready's reason %q, want %q", c.phase, c.reason, r, c.readyReason)
		}
	}
}

// A condition moves its lastTransitionTime only when its status changes; the
// same phase again yields the very same conditions (so no status write).
func TestConditionsTransitionOnlyOnChange(t *testing.T) {
	t0, t1, t2 := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0)), metav1.NewTime(time.Unix(3000, 0))
	insync := v1alpha1.MachinePoolSyncStatus{Phase: v1alpha1.PhaseInSync, ObservedGeneration: 3, Total: 4, Synced: 4}
	first := Conditions(insync, nil, t0)
	again := Conditions(insync, first, t1)
	if !sameSummary(v1alpha1.MachinePoolSyncStatus{Conditions: first}, v1alpha1.MachinePoolSyncStatus{Conditions: again}) {
		t.Fatalf("the same phase again changed the conditions:\n%+v\n%+v", first, again)
	}

	// A new generation that fails to write: Ready turns False (transition),
	// Progressing True (transition), Degraded stays False (no transition,
	// but its observedGeneration follows).
	failing := v1alpha1.MachinePoolSyncStatus{Phase: v1alpha1.PhaseDrifted, Reason: v1alpha1.ReasonWriteFailed, Message: "boom", ObservedGeneration: 4, Total: 4, Synced: 1}
	next := Conditions(failing, again, t2)
	for typ, wantTime := range map[string]metav1.Time{
		v1alpha1.ConditionReady:       t2,
		v1alpha1.ConditionProgressing: t2,
		v1alpha1.ConditionDegraded:    t0,
	} {
		c := meta.FindStatusCondition(next, typ)
		if !c.LastTransitionTime.Equal(&wantTime) || c.ObservedGeneration != 4 {
			t.Errorf("%s: %+v, want lastTransitionTime %v and observedGeneration 4", typ, c, wantTime.Time)
		}
	}
	// The input was not edited (it may be the cache's).
	if c := meta.FindStatusCondition(again, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue || c.ObservedGeneration != 3 {
		t.Errorf("old conditions edited in place: %+v", c)
	}
}
