package fleet

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// rolloutFleet is one pool's targets on a pretend spoke, whose taints a
// test sets as the writes would.
type rolloutFleet struct {
	targets []nmsync.Target
}

func newRolloutFleet(n int) *rolloutFleet {
	f := &rolloutFleet{}
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		f.targets = append(f.targets, nmsync.Target{
			Pool:    "workers",
			Machine: &machinev1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}},
			Node:    &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + name}},
		})
	}
	return f
}

// write applies the plans of one sync's admitted targets (full Desired).
func (f *rolloutFleet) write(paced []nmsync.Desired, skip ...string) {
	for j, t := range f.targets {
		if paced[j].Deferred != nil || slices.Contains(skip, t.Machine.Name) {
			continue
		}
		t.Machine.Spec.Taints = paced[j].Taints
		t.Node.Spec.Taints = paced[j].Taints
	}
}

// land tells p that the writes of the sync that made d and paced returned
// at at: one request for each target written in full, as the reconciler's
// write reports them (pacer.landed).
func (f *rolloutFleet) land(p *pacer, d *Decision, paced []nmsync.Desired, at time.Time) {
	pw := &poolWork{}
	results := [][][]nmsync.Result{make([][]nmsync.Result, len(f.targets))}
	for j, t := range f.targets {
		pw.targets = append(pw.targets, targetWork{desired: paced[j], target: t})
		if paced[j].Deferred == nil {
			results[0][j] = []nmsync.Result{{Kind: nmsync.ResultKindNode, Name: t.Node.Name, Outcome: nmsync.OutcomePatched, Requests: 1}}
		}
	}
	pools := []hivev1.MachinePool{{ObjectMeta: metav1.ObjectMeta{Name: "c-workers"}}}
	p.landed("ns/c", pools, d, []*poolWork{pw}, results, at)
}

func rolloutDecision(pacing nmsync.Pacing, taints ...corev1.Taint) *Decision {
	return &Decision{
		Results: []PoolResult{{Cluster: "ns/c", Pool: "c-workers", PoolName: "workers"}},
		Desired: []*nmsync.Desired{{Taints: taints}},
		Pacing:  []nmsync.Pacing{pacing},
	}
}

type round struct {
	at               time.Duration // after t0
	started, waiting []string
	next             time.Duration // after t0; -1 for none
}

func checkRound(t *testing.T, d *Decision, paced [][]nmsync.Desired, t0 time.Time, want round) {
	t.Helper()
	ro := d.Results[0].Rollout
	got := round{at: want.at, next: -1}
	if ro != nil {
		got.started, got.waiting = ro.Started, ro.Waiting
		if !ro.NextBatch.IsZero() {
			got.next = ro.NextBatch.Sub(t0)
		}
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(round{})); diff != "" {
		t.Errorf("at t0+%s (-want +got):\n%s", want.at, diff)
	}
	for j, pd := range paced[0] {
		if (pd.Deferred != nil) != slices.Contains(got.waiting, fmt.Sprintf("m%d", j)) {
			t.Errorf("at t0+%s: m%d deferred=%v, waiting %v", want.at, j, pd.Deferred != nil, got.waiting)
		}
	}
}

// play runs one sync of the fleet's pool at t0+want.at through p's gate,
// checks it against want, and returns the Decision and the plans' Desired.
func (f *rolloutFleet) play(t *testing.T, p *pacer, pacing nmsync.Pacing, t0 time.Time, want round, taints ...corev1.Taint) (*Decision, []nmsync.Desired) {
	t.Helper()
	d := rolloutDecision(pacing, taints...)
	paced := d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, t0.Add(want.at)))
	checkRound(t, d, paced, t0, want)
	return d, paced[0]
}

func TestPacedRollout(t *testing.T) {
	gpu := corev1.Taint{Key: "gpu", Value: "a", Effect: corev1.TaintEffectNoExecute}
	pacing := nmsync.Pacing{Count: 2, Interval: 10 * time.Second}
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	s := time.Second

	t.Run("batches of 2, 10s apart", func(t *testing.T) {
		f, p := newRolloutFleet(5), newPacer()
		for _, want := range []round{
			{at: 0, started: []string{"m0", "m1"}, waiting: []string{"m2", "m3", "m4"}, next: 10 * s},
			{at: 5 * s, waiting: []string{"m2", "m3", "m4"}, next: 10 * s},
			{at: 10 * s, started: []string{"m2", "m3"}, waiting: []string{"m4"}, next: 20 * s},
			{at: 20 * s, started: []string{"m4"}, next: -1},
			{at: 25 * s, next: -1},
		} {
			_, paced := f.play(t, p, pacing, t0, want, gpu)
			f.write(paced)
		}
		if !p.finished("ns/c", "c-workers") || p.finished("ns/c", "c-workers") {
			t.Error("finished: want true once, at the end of the rollout")
		}
		// A new value right after the last batch waits the interval after it.
		gpuB := gpu
		gpuB.Value = "b"
		for _, want := range []round{
			{at: 21 * s, waiting: []string{"m0", "m1", "m2", "m3", "m4"}, next: 30 * s},
			{at: 30 * s, started: []string{"m0", "m1"}, waiting: []string{"m2", "m3", "m4"}, next: 40 * s},
		} {
			_, paced := f.play(t, p, pacing, t0, want, gpuB)
			f.write(paced)
		}
	})

	t.Run("the interval runs from when a batch's writes landed", func(t *testing.T) {
		// The first batch's writes take 4 s (a loaded spoke, a slow webhook):
		// the next batch is due 10 s after they returned, not after the batch
		// was admitted, and the status and the requeue say so.
		f, p := newRolloutFleet(5), newPacer()
		d, paced := f.play(t, p, pacing, t0, round{at: 0, started: []string{"m0", "m1"}, waiting: []string{"m2", "m3", "m4"}, next: 10 * s}, gpu)
		f.write(paced)
		f.land(p, d, paced, t0.Add(4*s))
		if got := d.Results[0].Rollout.NextBatch.Sub(t0); got != 14*s {
			t.Errorf("after the writes landed at t0+4s, the next batch is due at t0+%s, want t0+14s", got)
		}
		for _, want := range []round{
			{at: 10 * s, waiting: []string{"m2", "m3", "m4"}, next: 14 * s},
			{at: 14 * s, started: []string{"m2", "m3"}, waiting: []string{"m4"}, next: 24 * s},
		} {
			d, paced := f.play(t, p, pacing, t0, want, gpu)
			f.write(paced)
			f.land(p, d, paced, t0.Add(want.at)) // these land at once
		}
		// A sync that writes nothing of a batch in flight moves nothing.
		d, paced = f.play(t, p, pacing, t0, round{at: 20 * s, waiting: []string{"m4"}, next: 24 * s}, gpu)
		f.land(p, d, paced, t0.Add(21*s))
		f.play(t, p, pacing, t0, round{at: 24 * s, started: []string{"m4"}, next: -1}, gpu)
	})

	t.Run("a last batch written again lands when that write returns", func(t *testing.T) {
		// m1's writes failed; m0's landed at 1 s. m1 is written again at 5 s and
		// lands at 6 s: a new value's rollout waits the interval from then.
		f, p := newRolloutFleet(2), newPacer()
		d, paced := f.play(t, p, pacing, t0, round{at: 0, started: []string{"m0", "m1"}, next: -1}, gpu)
		f.write(paced, "m1")
		f.land(p, d, paced, t0.Add(1*s))
		d, paced = f.play(t, p, pacing, t0, round{at: 5 * s, next: -1}, gpu)
		f.write(paced)
		f.land(p, d, paced, t0.Add(6*s))
		if !p.finished("ns/c", "c-workers") {
			t.Fatal("the rollout is not finished once every target holds the taint")
		}
		gpuB := gpu
		gpuB.Value = "b"
		f.play(t, p, pacing, t0, round{at: 7 * s, waiting: []string{"m0", "m1"}, next: 16 * s}, gpuB)
		f.play(t, p, pacing, t0, round{at: 16 * s, started: []string{"m0", "m1"}, next: -1}, gpuB)
	})

	t.Run("a restarted controller waits one interval", func(t *testing.T) {
		f := newRolloutFleet(4)
		d := rolloutDecision(pacing, gpu)
		f.write(d.Pace([][]nmsync.Target{f.targets}, newPacer().gate("ns/c", []string{"c-workers"}, d, t0))[0])
		p := newPacer() // the restart
		for _, want := range []round{
			{at: 1 * s, waiting: []string{"m2", "m3"}, next: 11 * s},
			{at: 11 * s, started: []string{"m2", "m3"}, next: -1},
		} {
			_, paced := f.play(t, p, pacing, t0, want, gpu)
			f.write(paced)
		}
	})

	t.Run("a batch whose writes failed is finished before the next starts", func(t *testing.T) {
		f, p := newRolloutFleet(4), newPacer()
		for _, want := range []round{
			{at: 0, started: []string{"m0", "m1"}, waiting: []string{"m2", "m3"}, next: 10 * s},
			// m1's writes failed: it is retried, and no new batch starts.
			{at: 10 * s, waiting: []string{"m2", "m3"}, next: 10 * s},
			{at: 11 * s, started: []string{"m2", "m3"}, next: -1},
		} {
			_, paced := f.play(t, p, pacing, t0, want, gpu)
			if want.at == 0 {
				f.write(paced, "m1")
			} else {
				f.write(paced)
			}
		}
	})

	t.Run("a last batch whose write failed is finished at once, and the rollout ends after", func(t *testing.T) {
		f, p := newRolloutFleet(2), newPacer()
		for _, want := range []round{
			{at: 0, started: []string{"m0", "m1"}, next: -1},
			// m1's write failed: still in flight, written again at once.
			{at: 1 * s, next: -1},
		} {
			d, paced := f.play(t, p, pacing, t0, want, gpu)
			if want.at == 0 {
				f.write(paced, "m1")
				if ro := d.Results[0].Rollout; ro == nil {
					t.Fatal("the last batch's sync has no Rollout")
				}
				continue
			}
			if ro := d.Results[0].Rollout; ro == nil || fmt.Sprint(ro.Finishing) != "[m1]" || paced[1].Deferred != nil {
				t.Fatalf("m1 is not finished in full: rollout %+v, desired %+v", ro, paced[1])
			}
			f.write(paced)
		}
		d := rolloutDecision(pacing, gpu)
		d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, t0.Add(2*s)))
		if d.Results[0].Rollout != nil || !p.finished("ns/c", "c-workers") {
			t.Errorf("after every target is Done: rollout %+v, want none and the rollout finished", d.Results[0].Rollout)
		}
	})

	t.Run("a second NoExecute taint is paced although the first is everywhere", func(t *testing.T) {
		f, p := newRolloutFleet(4), newPacer()
		base := corev1.Taint{Key: "base", Value: "1", Effect: corev1.TaintEffectNoExecute}
		for _, tg := range f.targets {
			tg.Machine.Spec.Taints = []corev1.Taint{base}
			tg.Node.Spec.Taints = []corev1.Taint{base}
		}
		d := rolloutDecision(pacing, base, gpu)
		paced := d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, t0))
		checkRound(t, d, paced, t0, round{started: []string{"m0", "m1"}, waiting: []string{"m2", "m3"}, next: 10 * s})
	})

	t.Run("a changed value follows the new spec, after the interval", func(t *testing.T) {
		f, p := newRolloutFleet(3), newPacer()
		d := rolloutDecision(pacing, gpu)
		f.write(d.Pace([][]nmsync.Target{f.targets}, p.gate("ns/c", []string{"c-workers"}, d, t0))[0])
		gpuB := gpu
		gpuB.Value = "b"
		for _, want := range []round{
			{at: 2 * s, waiting: []string{"m0", "m1", "m2"}, next: 10 * s},
			{at: 10 * s, started: []string{"m0", "m1"}, waiting: []string{"m2"}, next: 20 * s},
		} {
			_, paced := f.play(t, p, pacing, t0, want, gpuB)
			f.write(paced)
		}
	})

	t.Run("all at once", func(t *testing.T) {
		f := newRolloutFleet(3)
		d := rolloutDecision(nmsync.Pacing{All: true}, gpu)
		paced := d.Pace([][]nmsync.Target{f.targets}, newPacer().gate("ns/c", []string{"c-workers"}, d, t0))
		checkRound(t, d, paced, t0, round{started: []string{"m0", "m1", "m2"}, next: -1})
	})

	t.Run("dry run and drift report start nothing", func(t *testing.T) {
		f := newRolloutFleet(3)
		d := rolloutDecision(pacing, gpu)
		paced := d.Pace([][]nmsync.Target{f.targets}, d.noNewBatch(t0))
		checkRound(t, d, paced, t0, round{waiting: []string{"m0", "m1", "m2"}, next: -1})
	})

	t.Run("no NoExecute taint: nothing paced", func(t *testing.T) {
		f := newRolloutFleet(3)
		d := rolloutDecision(pacing, corev1.Taint{Key: "gpu", Value: "a", Effect: corev1.TaintEffectNoSchedule})
		paced := d.Pace([][]nmsync.Target{f.targets}, newPacer().gate("ns/c", []string{"c-workers"}, d, t0))
		checkRound(t, d, paced, t0, round{next: -1})
	})
}

// TestRollingOutStatus: a pool whose NoExecute taint waits is RollingOut,
// never InSync, with its progress and next batch; failures still say Drifted.
func TestRollingOutStatus(t *testing.T) {
	next := time.Date(2026, 11, 23, 12, 0, 10, 500, time.UTC)
	ro := &Rollout{Taints: []corev1.Taint{{Key: "gpu", Value: "a", Effect: corev1.TaintEffectNoExecute}},
		Pacing: nmsync.Pacing{Count: 2, Interval: 10 * time.Second}, Total: 5, Batch: 2,
		Waiting: []string{"m2", "m3", "m4"}, NextBatch: next}
	ok := []nmsync.Result{{Kind: "Machine", Name: "m0", Outcome: nmsync.OutcomeInSync}, {Kind: "Node", Name: "n0", Outcome: nmsync.OutcomeInSync}}
	st := Status(PoolResult{Cluster: "ns/c", PoolName: "workers", Results: ok, Rollout: ro})
	nb := metav1.NewTime(next.Truncate(time.Second))
	want := v1alpha1.MachinePoolSyncStatus{Cluster: "c", Pool: "workers", Phase: v1alpha1.PhaseRollingOut, Reason: v1alpha1.ReasonNoExecutePaced,
		Total: 2, Synced: 2,
		Message: "gpu=a:NoExecute reaches existing Nodes 2 Nodes at a time every 10s: 2/5 done",
		Rollout: &v1alpha1.RolloutStatus{Taints: "gpu=a:NoExecute", Progress: "2/5", Done: 2, Total: 5, Batch: 2, Interval: "10s", NextBatchTime: &nb}}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !sameSummary(st, *st.DeepCopy()) {
		t.Error("sameSummary: a rollout status differs from its copy")
	}
	local := st.DeepCopy()
	local.Rollout.NextBatchTime = &metav1.Time{Time: nb.In(time.FixedZone("east", 3600))}
	if !sameSummary(st, *local) {
		t.Error("sameSummary: the same next batch time in another location (as read back from the API) is news")
	}
	moved := st.DeepCopy()
	moved.Rollout.NextBatchTime = &metav1.Time{Time: nb.Add(10 * time.Second)}
	if sameSummary(st, *moved) {
		t.Error("sameSummary: a new next batch time is no news")
	}
	failed := append(ok, nmsync.Result{Kind: "Machine", Name: "m1", Outcome: nmsync.OutcomeFailed})
	if st := Status(PoolResult{Results: failed, Rollout: ro}); st.Phase != v1alpha1.PhaseDrifted || st.Rollout == nil {
		t.Errorf("with a failed write: phase %s, rollout %v; want Drifted with the rollout", st.Phase, st.Rollout)
	}
}

// TestContestedStatus: held objects count as not delivered, and the phase
// says Contested with the objects named, never InSync.
func TestContestedStatus(t *testing.T) {
	target := nmsync.Target{Machine: &machinev1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1"}}, Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
	results := append([]nmsync.Result{{Kind: "Machine", Name: "m0", Outcome: nmsync.OutcomeInSync}},
		contestedResults(context.Background(), nmsync.Desired{Labels: map[string]string{"a": "1"}}, target)...)
	st := Status(PoolResult{Cluster: "ns/c", PoolName: "workers", Results: results})
	want := v1alpha1.MachinePoolSyncStatus{Cluster: "c", Pool: "workers", Phase: v1alpha1.PhaseContested, Reason: v1alpha1.ReasonContested,
		Total: 3, Synced: 1, Drifted: 2,
		Message: "2 object(s) not written for a while: another writer kept undoing this pool's metadata on them: Machine m1, Node n1"}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if c := Count(results); c.DriftedByKind["Node"] != 1 || c.DriftedByKind["Machine"] != 1 {
		t.Errorf("drifted by kind %v: the metric must count held objects", c.DriftedByKind)
	}
}
