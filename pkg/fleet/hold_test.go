package fleet

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

func setReady(n *corev1.Node, s corev1.ConditionStatus) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s}}
}

// The health gate: a NotReady Node the rollout tainted holds the next
// batch until it is Ready again; more NotReady or cordoned Nodes than a
// batch hold it too; a restarted controller (a new pacer) holds it alike.
func TestHealthGateHoldsTheNextBatch(t *testing.T) {
	taint := corev1.Taint{Key: "example.com/drain", Value: "v", Effect: corev1.TaintEffectNoExecute}
	d := rolloutDecision(nmsync.Pacing{Count: 1, Interval: time.Second}, taint)
	f := newRolloutFleet(4)
	p := newPacer()
	t0 := time.Unix(1_000_000, 0)
	sync := func(p *pacer, at time.Time) *Rollout {
		t.Helper()
		f.write(d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, at))[0])
		return d.Results[0].Rollout
	}
	ro := sync(p, t0)
	if len(ro.Started) != 1 || ro.Hold.Reason != "" {
		t.Fatalf("first batch: %+v", ro)
	}
	first := f.targets[0].Node // the batch takes the first Machine
	if !nmsync.HeldBy(f.targets[0], taint) {
		t.Fatalf("the first batch was not written to %s", first.Name)
	}

	// The tainted Node goes NotReady: the next batch, due, does not start.
	setReady(first, corev1.ConditionFalse)
	ro = sync(p, t0.Add(2*time.Second))
	if len(ro.Started) != 0 || ro.Hold.Reason != v1alpha1.ReasonNodesNotReady || len(ro.Hold.Nodes) != 1 || ro.Hold.Nodes[0] != first.Name {
		t.Errorf("a tainted Node NotReady: %+v, want no batch, held by %s", ro, first.Name)
	}
	if st := Status(PoolResult{Rollout: ro, Results: nil}); st.Phase != v1alpha1.PhaseRollingOut || st.Reason != v1alpha1.ReasonNodesNotReady {
		t.Errorf("status of a held rollout: %s/%s %q", st.Phase, st.Reason, st.Message)
	}
	// The dry run and the drift report (which start no batch) say the same hold.
	d.Pace([][]nmsync.Target{f.targets}, d.noNewBatch(t0.Add(2*time.Second)))
	if h := d.Results[0].Rollout.Hold; h.Reason != v1alpha1.ReasonNodesNotReady {
		t.Errorf("dry run: hold %+v, want %s", h, v1alpha1.ReasonNodesNotReady)
	}
	// Unknown holds as False does; so does a controller that restarts.
	setReady(first, corev1.ConditionUnknown)
	if ro = sync(newPacer(), t0.Add(time.Hour)); len(ro.Started) != 0 || ro.Hold.Reason != v1alpha1.ReasonNodesNotReady {
		t.Errorf("Ready Unknown, after a restart: %+v", ro)
	}
	// Ready again: the next batch starts at once (its interval is long past).
	setReady(first, corev1.ConditionTrue)
	if ro = sync(p, t0.Add(3*time.Second)); len(ro.Started) != 1 || ro.Hold.Reason != "" {
		t.Errorf("Ready again: %+v, want the next batch", ro)
	}

	// Two Nodes of the pool not yet tainted are NotReady or cordoned: more
	// than the batch (1).
	setReady(f.targets[2].Node, corev1.ConditionFalse)
	f.targets[3].Node.Spec.Unschedulable = true
	if ro = sync(p, t0.Add(10*time.Second)); len(ro.Started) != 0 || ro.Hold.Reason != v1alpha1.ReasonNodesNotReady || len(ro.Hold.Nodes) != 2 {
		t.Errorf("2 of 4 Nodes sick, batch 1: %+v", ro)
	}
	// One: no more than a batch, so it goes on.
	f.targets[3].Node.Spec.Unschedulable = false
	if ro = sync(p, t0.Add(11*time.Second)); len(ro.Started) != 1 || ro.Hold.Reason != "" {
		t.Errorf("1 of 4 Nodes sick, batch 1: %+v", ro)
	}
}

// A maintenance window: outside it no batch starts and the next batch is
// when it opens; inside it the rollout goes on. Pacing "all" keeps to it too.
func TestWindowHoldsBatches(t *testing.T) {
	w, err := nmsync.ParseWindow("schedule=0 2 * * *; duration=1h")
	if err != nil {
		t.Fatal(err)
	}
	taint := corev1.Taint{Key: "example.com/drain", Effect: corev1.TaintEffectNoExecute}
	day := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for _, pacing := range []nmsync.Pacing{{Count: 1, Interval: time.Second, Window: w}, {All: true, Window: w}} {
		d := rolloutDecision(pacing, taint)
		f := newRolloutFleet(2)
		p := newPacer()
		at := day.Add(90 * time.Minute) // 01:30, closed
		f.write(d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, at))[0])
		ro := d.Results[0].Rollout
		if len(ro.Started) != 0 || ro.Hold.Reason != v1alpha1.ReasonOutsideWindow || !ro.NextBatch.Equal(day.Add(2*time.Hour)) {
			t.Errorf("%s at 01:30: %+v, want held until 02:00", pacing, ro)
		}
		at = day.Add(2*time.Hour + time.Minute) // 02:01, open
		f.write(d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, at))[0])
		if ro = d.Results[0].Rollout; len(ro.Started) == 0 || ro.Hold.Reason != "" {
			t.Errorf("%s at 02:01: %+v, want a batch", pacing, ro)
		}
	}
}

// A hold says the same on every sync: its status does not move (no hub
// write per sync while it lasts), even before the first batch.
func TestHoldStatusIsStable(t *testing.T) {
	taint := corev1.Taint{Key: "example.com/drain", Value: "v", Effect: corev1.TaintEffectNoExecute}
	d := rolloutDecision(nmsync.Pacing{Count: 1, Interval: time.Second}, taint)
	f := newRolloutFleet(4)
	setReady(f.targets[0].Node, corev1.ConditionFalse)
	f.targets[1].Node.Spec.Unschedulable = true
	p := newPacer()
	t0 := time.Unix(1_000_000, 0)
	var statuses []v1alpha1.MachinePoolSyncStatus
	for _, at := range []time.Duration{0, 10 * time.Minute, time.Hour} {
		d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, t0.Add(at)))
		ro := d.Results[0].Rollout
		if len(ro.Started) != 0 || ro.Hold.Reason != v1alpha1.ReasonNodesNotReady {
			t.Fatalf("2 of 4 sick, batch 1: %+v", ro)
		}
		statuses = append(statuses, Status(PoolResult{Rollout: ro}))
	}
	for _, st := range statuses[1:] {
		if !sameSummary(statuses[0], st) {
			t.Errorf("a held rollout's status moved between syncs:\n%+v\n%+v", statuses[0].Rollout, st.Rollout)
		}
	}
}

// A Node already NotReady when the rollout starts (no more than a batch of
// them) is taken last, and does not then hold the rollout it did not
// sicken: the rollout ends.
func TestSickNodeTakenLastDoesNotHoldTheRollout(t *testing.T) {
	taint := corev1.Taint{Key: "example.com/drain", Value: "v", Effect: corev1.TaintEffectNoExecute}
	d := rolloutDecision(nmsync.Pacing{Count: 1, Interval: time.Second}, taint)
	f := newRolloutFleet(3)
	setReady(f.targets[0].Node, corev1.ConditionUnknown) // m0, first by name
	p := newPacer()
	t0 := time.Unix(1_000_000, 0)
	var order []string
	for k := range 6 {
		d.Results[0].Rollout = nil // each sync decides anew
		f.write(d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, t0.Add(time.Duration(k)*2*time.Second)))[0])
		if ro := d.Results[0].Rollout; ro != nil {
			order = append(order, ro.Started...)
		}
	}
	if want := []string{"m1", "m2", "m0"}; !slices.Equal(order, want) {
		t.Errorf("batches took %v, want %v (the NotReady Node last)", order, want)
	}
	if ro := d.Results[0].Rollout; ro != nil {
		t.Errorf("the rollout did not end: %+v", ro)
	}
}

// A batch in flight written again while the window is closed lands then: the
// next batch is due the interval after that landing when it comes after the
// window opens, and the Rollout says so.
func TestLandingAfterTheWindowOpensMovesTheNextBatch(t *testing.T) {
	w, err := nmsync.ParseWindow("schedule=0 * * * *; duration=50m") // open :00 to :50
	if err != nil {
		t.Fatal(err)
	}
	pacing := nmsync.Pacing{Count: 1, Interval: 10 * time.Minute, Window: w}
	taint := corev1.Taint{Key: "example.com/drain", Effect: corev1.TaintEffectNoExecute}
	day := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	f, p := newRolloutFleet(2), newPacer()
	d := rolloutDecision(pacing, taint)
	paced := d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, day.Add(time.Hour+49*time.Minute)))[0]
	f.write(paced, "m0") // 01:49: m0 admitted, its writes fail
	f.land(p, d, paced, day.Add(time.Hour+49*time.Minute))
	at := day.Add(time.Hour + 55*time.Minute) // 01:55, closed until 02:00; m0 written again
	d = rolloutDecision(pacing, taint)
	paced = d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, at))[0]
	if ro := d.Results[0].Rollout; ro.Hold.Reason != v1alpha1.ReasonOutsideWindow || !ro.NextBatch.Equal(day.Add(2*time.Hour)) {
		t.Fatalf("at 01:55 before the landing: %+v, want held until 02:00", ro)
	}
	f.write(paced)
	f.land(p, d, paced, at)
	if ro := d.Results[0].Rollout; !ro.NextBatch.Equal(at.Add(10 * time.Minute)) {
		t.Errorf("after m0 landed at 01:55: next batch %s, want 02:05 (the interval from the landing, after the window opens)", ro.NextBatch.Format("15:04"))
	}
}
