package sync

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
)

func TestPacingFromAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		want    Pacing
		wantErr string
	}{
		{name: "defaults", want: DefaultPacing},
		{name: "count", ann: map[string]string{AnnotationNoExecuteBatch: "2", AnnotationNoExecuteInterval: "5s"}, want: Pacing{Count: 2, Percent: 10, Interval: 5 * time.Second}},
		{name: "percent", ann: map[string]string{AnnotationNoExecuteBatch: "25%"}, want: Pacing{Percent: 25, Interval: 2 * time.Minute}},
		{name: "zero interval", ann: map[string]string{AnnotationNoExecuteInterval: "0s"}, want: Pacing{Percent: 10}},
		{name: "batch all", ann: map[string]string{AnnotationNoExecuteBatch: "all"}, want: Pacing{All: true, Percent: 10, Interval: 2 * time.Minute}},
		{name: "interval all", ann: map[string]string{AnnotationNoExecuteInterval: "all"}, want: Pacing{All: true, Percent: 10, Interval: 2 * time.Minute}},
		{name: "zero count", ann: map[string]string{AnnotationNoExecuteBatch: "0"}, wantErr: "noexecute-batch"},
		{name: "negative", ann: map[string]string{AnnotationNoExecuteBatch: "-1"}, wantErr: "noexecute-batch"},
		{name: "percent over 100", ann: map[string]string{AnnotationNoExecuteBatch: "150%"}, wantErr: "noexecute-batch"},
		{name: "words", ann: map[string]string{AnnotationNoExecuteBatch: "two"}, wantErr: "noexecute-batch"},
		{name: "bad interval", ann: map[string]string{AnnotationNoExecuteInterval: "soon"}, wantErr: "noexecute-interval"},
		{name: "negative interval", ann: map[string]string{AnnotationNoExecuteInterval: "-5s"}, wantErr: "noexecute-interval"},
		{name: "interval too long", ann: map[string]string{AnnotationNoExecuteInterval: "48h"}, wantErr: "noexecute-interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PacingFromAnnotations(tc.ann)
			if tc.wantErr != "" {
				var ve *ValidationError
				if !errors.As(err, &ve) || len(ve.Problems) == 0 || ve.Problems[0].Code != CodeInvalidPacing || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want an InvalidPacing ValidationError naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestBatchSize(t *testing.T) {
	for _, tc := range []struct {
		p           Pacing
		nodes, want int
	}{
		{DefaultPacing, 0, 1}, {DefaultPacing, 9, 1}, {DefaultPacing, 10, 1}, {DefaultPacing, 25, 2}, {DefaultPacing, 100, 10},
		{Pacing{Count: 2}, 10, 2}, {Pacing{Count: 20}, 10, 20},
		{Pacing{Percent: 25}, 10, 2}, {Pacing{Percent: 100}, 7, 7},
		{Pacing{All: true}, 7, 7},
	} {
		if got := tc.p.BatchSize(tc.nodes); got != tc.want {
			t.Errorf("%+v.BatchSize(%d) = %d, want %d", tc.p, tc.nodes, got, tc.want)
		}
	}
}

func TestProgressOf(t *testing.T) {
	d := Desired{Taints: []corev1.Taint{taint("gpu", "a", noExecute), taint("b", "", noSchedule)}}
	target := func(mt, nt []corev1.Taint, withNode bool) Target {
		t := Target{Machine: newMachine("m", machineTaints(mt...))}
		if withNode {
			t.Node = newNode("n", nodeTaints(nt...))
		} else {
			t.NodeSkip = NodeSkipNoNodeRef
		}
		return t
	}
	paced := taint("gpu", "a", noExecute)
	old := taint("gpu", "old", noExecute)
	for _, tc := range []struct {
		name string
		t    Target
		want Progress
	}{
		{"neither", target(nil, nil, true), ProgressPending},
		{"old value on both", target([]corev1.Taint{old}, []corev1.Taint{old}, true), ProgressPending},
		{"machine only", target([]corev1.Taint{paced}, nil, true), ProgressStarted},
		{"node only", target(nil, []corev1.Taint{paced}, true), ProgressStarted},
		{"both", target([]corev1.Taint{paced}, []corev1.Taint{paced}, true), ProgressDone},
		{"no node yet", target(nil, nil, false), ProgressExempt},
	} {
		if got := ProgressOf(d, tc.t); got != tc.want {
			t.Errorf("%s: ProgressOf = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := ProgressOf(Desired{Taints: []corev1.Taint{taint("b", "", noSchedule)}}, target(nil, nil, true)); got != ProgressDone {
		t.Errorf("no paced taints: ProgressOf = %d, want Done", got)
	}
	running := target(nil, nil, false)
	phase := "Running"
	running.Machine.Status.Phase = &phase
	if got := ProgressOf(d, running); got != ProgressPending {
		t.Errorf("a Running Machine without nodeRef: ProgressOf = %d, want Pending (its Node exists)", got)
	}
	// Two NoExecute taints: one already everywhere does not make the other
	// one's rollout Started.
	two := Desired{Taints: []corev1.Taint{paced, taint("second", "1", noExecute)}}
	second := taint("second", "1", noExecute)
	for _, tc := range []struct {
		name string
		t    Target
		want Progress
	}{
		{"first on both, second on neither", target([]corev1.Taint{paced}, []corev1.Taint{paced}, true), ProgressPending},
		{"first on both, second on the Machine", target([]corev1.Taint{paced, second}, []corev1.Taint{paced}, true), ProgressStarted},
		{"both on both", target([]corev1.Taint{paced, second}, []corev1.Taint{second, paced}, true), ProgressDone},
	} {
		if got := ProgressOf(two, tc.t); got != tc.want {
			t.Errorf("two paced taints, %s: ProgressOf = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestAdmit(t *testing.T) {
	P, D, S, E := ProgressPending, ProgressDone, ProgressStarted, ProgressExempt
	for _, tc := range []struct {
		name     string
		progress []Progress
		batch    int
		want     []bool
	}{
		{"first batch", []Progress{P, P, P, P}, 2, []bool{true, true, false, false}},
		{"interval running", []Progress{D, D, P, P}, 0, []bool{true, true, false, false}},
		{"next batch", []Progress{D, E, P, P, P}, 2, []bool{true, true, true, true, false}},
		{"finish a started batch first", []Progress{S, P, P}, 2, []bool{true, false, false}},
		{"batch larger than the rest", []Progress{D, P}, 5, []bool{true, true}},
	} {
		if diff := cmp.Diff(tc.want, Admit(tc.progress, tc.batch)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestDeferringPlans: a deferred NoExecute taint is neither added, nor
// changed, nor adopted, nor removed; the rest of the pool applies.
func TestDeferringPlans(t *testing.T) {
	d := Desired{Labels: pairs("a", "1"), Taints: []corev1.Taint{taint("gpu", "new", noExecute), taint("b", "", noSchedule)}}
	for _, tc := range []struct {
		name       string
		node       *corev1.Node
		wantTaints []corev1.Taint
		wantOwned  string
	}{
		{"absent stays absent", newNode("n"), []corev1.Taint{taint("b", "", noSchedule)}, "b:NoSchedule"},
		{"owned old value kept and owned",
			newNode("n", nodeTaints(taint("gpu", "old", noExecute)), nodeAnnotations(AnnotationOwnedTaints, "gpu:NoExecute")),
			[]corev1.Taint{taint("gpu", "old", noExecute), taint("b", "", noSchedule)}, "b:NoSchedule,gpu:NoExecute"},
		{"foreign value kept, not adopted",
			newNode("n", nodeTaints(taint("gpu", "theirs", noExecute))),
			[]corev1.Taint{taint("gpu", "theirs", noExecute), taint("b", "", noSchedule)}, "b:NoSchedule"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanNode(d.DeferringFor(Target{Machine: newMachine("m"), Node: tc.node}), tc.node)
			after := applyPatch(t, tc.node, p.Patch)
			if diff := cmp.Diff(tc.wantTaints, after.Spec.Taints); diff != "" {
				t.Errorf("taints (-want +got):\n%s", diff)
			}
			if got := after.Annotations[AnnotationOwnedTaints]; got != tc.wantOwned {
				t.Errorf("owned taints = %q, want %q", got, tc.wantOwned)
			}
			if after.Labels["a"] != "1" {
				t.Errorf("label a not applied with the deferred taint: %v", after.Labels)
			}
		})
	}
}

// FuzzPacedRollout: planned with PacedDesired as Admit says, a round gives a
// NoExecute taint that neither a target's Machine nor its Node held (a new
// eviction) only to targets of the new batch, never to more than the batch,
// and leaves every other taint as the unpaced planner would.
func FuzzPacedRollout(f *testing.F) {
	f.Add([]byte{2, 5}, []byte{1, 7, 2, 16, 1, 7, 2, 16}, uint8(2))
	f.Add([]byte{0, 6, 1, 7}, []byte{0, 6, 3, 7, 5, 0, 9, 16, 4, 6, 6, 6}, uint8(1))
	// Two NoExecute taints, the first already on every object.
	f.Add([]byte{0, 6, 1, 7}, []byte{6, 6, 0, 0, 6, 6, 0, 0, 6, 6, 0, 0}, uint8(1))
	f.Add([]byte{0, 0}, []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, declared, spoke []byte, batch uint8) {
		_, dt := fuzzItems(declared, 1)
		d := Desired{Taints: dt}
		// Each four spoke bytes are one target: a Machine and a Node with up
		// to two taints each, from the same alphabets.
		var targets []Target
		for i := 0; i+3 < len(spoke) && len(targets) < 16; i += 4 {
			_, mt := fuzzItems([]byte{0, spoke[i], 4, spoke[i+2]}, 1)
			_, nt := fuzzItems([]byte{0, spoke[i+1], 4, spoke[i+3]}, 1)
			tg := Target{Machine: newMachine("m", machineTaints(mt...))}
			if spoke[i]%7 == 0 {
				tg.NodeSkip = NodeSkipNoNodeRef
			} else {
				tg.Node = newNode("n", nodeTaints(nt...))
			}
			targets = append(targets, tg)
		}
		progress := make([]Progress, len(targets))
		for i, tg := range targets {
			progress[i] = ProgressOf(d, tg)
		}
		admit := Admit(progress, int(batch%5))
		newlyTainted := 0
		for i, tg := range targets {
			di := PacedDesired(d, tg, progress[i], admit[i])
			plans := []Plan{PlanMachine(di, tg.Machine)}
			if tg.Node != nil {
				plans = append(plans, PlanNode(di, tg.Node))
			}
			// A new eviction: the round gives a paced taint to a target on
			// which neither the Machine nor the Node held it.
			evicts := false
			for _, p := range plans {
				for _, ch := range p.Changes {
					if ch.Kind != KindTaint || !strings.HasSuffix(ch.Key, ":"+string(noExecute)) ||
						(ch.Op != OpAdd && ch.Op != OpUpdate && ch.Op != OpOverride) {
						continue
					}
					for _, pt := range PacedTaints(d) {
						if taintID(pt) == ch.Key && !holds(tg.Machine.Spec.Taints, pt) && (tg.Node == nil || !holds(tg.Node.Spec.Taints, pt)) {
							evicts = true
						}
					}
				}
			}
			if evicts && progress[i] == ProgressExempt {
				continue // no Node yet: nothing to evict
			}
			if evicts && !(admit[i] && progress[i] == ProgressPending) {
				t.Errorf("target %d (%d) is in no new batch, but its plan gives it a NoExecute taint neither its Machine nor its Node held", i, progress[i])
			}
			if evicts {
				newlyTainted++
			}
			// The rest of the pool is not held back: with the paced taints
			// ignored, the deferred plan leaves the Machine as the full one.
			if !admit[i] {
				full := applyPatchOrSelf(t, tg.Machine, PlanMachine(d, tg.Machine).Patch)
				got := applyPatchOrSelf(t, tg.Machine, plans[0].Patch)
				if diff := cmp.Diff(withoutNoExecute(full.Spec.Taints), withoutNoExecute(got.Spec.Taints)); diff != "" {
					t.Errorf("target %d: deferring changed the other taints (-full +deferred):\n%s", i, diff)
				}
			}
		}
		if newlyTainted > int(batch%5) {
			t.Errorf("%d Pending targets get a NoExecute taint, batch is %d", newlyTainted, batch%5)
		}
	})
}

func applyPatchOrSelf(t *testing.T, m *machinev1beta1.Machine, patch []byte) *machinev1beta1.Machine {
	if patch == nil {
		return m
	}
	return applyPatch(t, m, patch)
}

func withoutNoExecute(ts []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, x := range ts {
		if x.Effect != noExecute {
			out = append(out, x)
		}
	}
	return out
}

// TestReclaim: an item removed a moment ago that is back with the removed
// value is removed again; with another value, or declared, or owned, it is
// not the reclaim's.
func TestReclaim(t *testing.T) {
	d := Desired{Labels: pairs("kept", "1"), Reclaim: Reclaim{
		Labels: map[string]string{"gone": "v1", "other": "v1", "kept": "1"},
		Taints: map[string]string{"gone:NoSchedule": "v1", "other:NoSchedule": "v1"},
	}}
	n := newNode("n", nodeLabels("kept", "1", "gone", "v1", "other", "v2"),
		nodeTaints(taint("gone", "v1", noSchedule), taint("other", "v2", noSchedule)),
		nodeAnnotations(AnnotationOwnedLabels, "kept"))
	p := PlanNode(d, n)
	after := applyPatch(t, n, p.Patch)
	if diff := cmp.Diff(pairs("kept", "1", "other", "v2"), after.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.Taint{taint("other", "v2", noSchedule)}, after.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	var ops []string
	for _, c := range p.Changes {
		ops = append(ops, string(c.Op)+" "+c.Key)
	}
	if diff := cmp.Diff([]string{"Reclaim gone", "Reclaim gone:NoSchedule"}, ops); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if again := PlanNode(d, after); !again.InSync() {
		t.Errorf("not in sync after the reclaim: %s", again.Patch)
	}
}

// TestReclaimExcept: what the Machine itself holds is nodelink's to copy,
// and is not reclaimed; another value on the Machine does not count.
func TestReclaimExcept(t *testing.T) {
	r := Reclaim{
		Labels: map[string]string{"copied": "v1", "gone": "v1"},
		Taints: map[string]string{"copied:NoSchedule": "t1", "gone:NoSchedule": "t1"},
	}
	m := newMachine("m", machineNodeLabels("copied", "v1", "gone", "other"), machineTaints(taint("copied", "t1", noSchedule), taint("gone", "t2", noSchedule)))
	want := Reclaim{Labels: map[string]string{"gone": "v1"}, Taints: map[string]string{"gone:NoSchedule": "t1"}}
	if diff := cmp.Diff(want, r.Except(m)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
