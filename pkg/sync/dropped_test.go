package sync

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// A Machine made from the template while the pool declared a label, a
// machine label and a taint, and planned for the first time after the pool
// dropped them: the record names none of them. Each goes only if its creator
// alone wrote it and the template no longer holds it.
func TestPlanMachineDroppedBeforeRecorded(t *testing.T) {
	const key = "example.com/late"
	late := taint(key, "1", corev1.TaintEffectNoSchedule)
	edge := taint("node-role.kubernetes.io/edge", "", corev1.TaintEffectNoSchedule)
	controller := func(m *machinev1beta1.Machine) {
		m.UID = "m-uid"
		m.OwnerReferences = []metav1.OwnerReference{
			{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet", Name: "ms", UID: "ms-uid", Controller: ptr.To(true)},
		}
	}
	ownerRef := fieldpath.MakePathOrDie("metadata", "ownerReferences", fieldpath.KeyByFields("uid", "ms-uid"))
	nodeLabel := fieldpath.MakePathOrDie("spec", "metadata", "labels", key)
	// created: the machineset controller wrote the labels, the taint list and
	// the ownerReference.
	created := func(extra ...fieldpath.Path) metav1.ManagedFieldsEntry {
		return managed("machineset-controller", pathLabels, []string{key, LabelMachineSet},
			append([]fieldpath.Path{ownerRef, nodeLabel, pathTaints}, extra...)...)
	}
	machine := func(taints []corev1.Taint, entries ...metav1.ManagedFieldsEntry) *machinev1beta1.Machine {
		return newMachine("m", controller, made(t0.Time),
			machineLabels(key, "1", LabelMachineSet, "ms"), machineNodeLabels(key, "1"),
			machineTaints(taints...), machineManaged(entries...))
	}
	// The pool dropped all three a minute after the Machine was made.
	drops := map[string]time.Time{"label/" + key + "=1": t0.Time.Add(time.Minute), "machineLabel/" + key + "=1": t0.Time.Add(time.Minute),
		"taint/" + key + ":NoSchedule=1": t0.Time.Add(time.Minute)}
	dropped := []Change{
		{Kind: KindMachineLabel, Op: OpRemove, Key: key, From: "1", Dropped: true},
		{Kind: KindNodeLabel, Op: OpRemove, Key: key, From: "1", Dropped: true},
		{Kind: KindTaint, Op: OpRemove, Key: key + ":NoSchedule", From: "1", Dropped: true},
	}
	tests := map[string]struct {
		machine      *machinev1beta1.Machine
		template     *Template
		drops        map[string]time.Time // nil: drops
		judged       bool
		wantChanges  []Change
		wantRead     bool
		wantTemplate bool
		wantJudged   bool
	}{
		"from a trimmed cache: read whole first": {
			machine:  newMachine("m", controller, made(t0.Time), machineLabels(key, "1"), machineTaints(late)),
			wantRead: true,
		},
		"the pool never declared them (an admin's template items, taken out of the template since): not looked at": {
			machine:  machine([]corev1.Taint{late}, created()),
			drops:    map[string]time.Time{"label/other=1": t0.Time.Add(time.Minute)},
			template: &Template{},
		},
		"the pool dropped another value: not looked at": {
			machine:  machine([]corev1.Taint{late}, created()),
			drops:    map[string]time.Time{"label/" + key + "=2": t0.Time.Add(time.Minute), "taint/" + key + ":NoSchedule=2": t0.Time.Add(time.Minute)},
			template: &Template{},
		},
		"made after the pool dropped them: not looked at": {
			machine:  newMachine("m", controller, made(t0.Time.Add(2*time.Minute)), machineLabels(key, "1"), machineTaints(late), machineManaged(created())),
			template: &Template{},
		},
		"written by a server-side apply of a manifest with the ownerReference: they stay": {
			machine: machine([]corev1.Taint{late}, func() metav1.ManagedFieldsEntry {
				e := created()
				e.Operation = metav1.ManagedFieldsOperationApply
				return e
			}()),
			template:   &Template{},
			wantJudged: true,
		},
		"the creator's alone: the template decides": {
			machine:      machine([]corev1.Taint{late}, created()),
			wantTemplate: true,
		},
		"the creator's alone, and gone from the template: all three go": {
			machine:     machine([]corev1.Taint{late}, created()),
			template:    &Template{},
			wantChanges: dropped,
			wantJudged:  true,
		},
		"still in the template (an installer's or admin's item, or Hive not synced yet): they stay": {
			machine:    machine([]corev1.Taint{late, edge}, created()),
			template:   &Template{MachineLabels: pairs(key, "1"), Labels: pairs(key, "2"), Taints: []corev1.Taint{late, edge}},
			wantJudged: true,
		},
		"the edge taint the template still holds stays; the dropped one goes": {
			machine:     machine([]corev1.Taint{late, edge}, created()),
			template:    &Template{Taints: []corev1.Taint{edge}},
			wantChanges: dropped,
			wantJudged:  true,
		},
		"set again by hand, or the list written by anyone else: they stay": {
			machine: machine([]corev1.Taint{late}, created(),
				managed("kubectl-label", pathLabels, []string{key}, nodeLabel),
				managed(FieldManager, nil, nil, pathTaints)),
			template:   &Template{},
			wantJudged: true,
		},
		"made by someone other than its controller's manager: nothing is the creator's": {
			machine: machine([]corev1.Taint{late},
				managed("machineset-controller", nil, nil, ownerRef),
				managed("someone", pathLabels, []string{key, LabelMachineSet}, nodeLabel, pathTaints)),
			template:   &Template{},
			wantJudged: true,
		},
		"judged before at this version: not looked at": {
			machine: machine([]corev1.Taint{late}, created()),
			judged:  true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.drops == nil {
				tc.drops = drops
			}
			got := PlanMachine(Desired{Template: tc.template, Judged: tc.judged, Dropped: tc.drops}, tc.machine)
			if diff := cmp.Diff(tc.wantChanges, got.Changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if got.NeedsRead != tc.wantRead || got.NeedsTemplate != tc.wantTemplate || got.Judged != tc.wantJudged {
				t.Errorf("NeedsRead %v, NeedsTemplate %v, Judged %v; want %v, %v, %v",
					got.NeedsRead, got.NeedsTemplate, got.Judged, tc.wantRead, tc.wantTemplate, tc.wantJudged)
			}
			if tc.wantChanges == nil && !got.InSync() {
				t.Errorf("a patch, want none: %s", got.Patch)
			}
			if got.InSync() {
				return
			}
			after := applyPatch(t, tc.machine, got.Patch)
			if after.Labels[LabelMachineSet] != "ms" || slices.ContainsFunc(after.Spec.Taints, func(x corev1.Taint) bool { return x.Key == key }) ||
				len(after.Spec.Taints) != len(tc.machine.Spec.Taints)-1 {
				t.Errorf("after the patch: labels %v, taints %v", after.Labels, after.Spec.Taints)
			}
		})
	}
}

func made(at time.Time) machineOpt {
	return func(m *machinev1beta1.Machine) { m.CreationTimestamp = metav1.NewTime(at) }
}

// NextDropped keeps what a pool dropped for DroppedTTL, from when it was
// first seen gone, and forgets an item declared again.
func TestNextDropped(t *testing.T) {
	d := Desired{Labels: pairs("a", "1"), MachineLabels: pairs("m", "1"), Taints: []corev1.Taint{taint("t", "1", corev1.TaintEffectNoSchedule)}}
	if got, want := d.Items(), []string{"label/a=1", "machineLabel/m=1", "taint/t:NoSchedule=1"}; !slices.Equal(got, want) {
		t.Fatalf("Items() = %v, want %v", got, want)
	}
	declared := []string{"label/a=1", "label/b=1", "machineLabel/m=2", "taint/t:NoSchedule=1"}
	before := map[string]time.Time{"label/c=1": t0.Time.Add(-DroppedTTL), "label/d=1": t0.Time.Add(-time.Hour), "label/a=1": t0.Time.Add(-time.Hour), "label/b=1": t0.Time.Add(-time.Hour)}
	got := NextDropped(declared, before, d, t0.Time)
	want := map[string]time.Time{"label/b=1": t0.Time.Add(-time.Hour), "label/d=1": t0.Time.Add(-time.Hour), "machineLabel/m=2": t0.Time}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NextDropped (-want +got):\n%s", diff)
	}
	many := map[string]time.Time{}
	for i := range maxDropped + 10 {
		many[fmt.Sprintf("label/k%03d=1", i)] = t0.Time.Add(-time.Duration(i) * time.Minute)
	}
	if got := NextDropped(nil, many, Desired{}, t0.Time); len(got) != maxDropped || !got[fmt.Sprintf("label/k%03d=1", 0)].Equal(t0.Time) {
		t.Errorf("NextDropped of %d kept %d, want the newest %d", len(many), len(got), maxDropped)
	}
}

// What a Machine's write removed goes from its Node too when the Node's
// copy was never recorded, judged as a recorded item is: a label nodelink
// alone set goes, one someone else set too stays; a taint with the value
// removed goes, one with another value stays.
func TestPlanNodeMachineRemoved(t *testing.T) {
	const key = "example.com/late"
	removed := Reclaim{Labels: pairs(key, "1", "example.com/shared", "1"), Taints: map[string]string{key + ":NoSchedule": "1", "example.com/other:NoSchedule": "1"}}
	n := newNode("n",
		nodeLabels(key, "1", "example.com/shared", "1", "example.com/mine", "1"),
		nodeTaints(taint(key, "1", corev1.TaintEffectNoSchedule), taint("example.com/other", "2", corev1.TaintEffectNoSchedule)),
		nodeManaged(managed("nodelink-controller", pathLabels, []string{key, "example.com/shared"}, pathNodeMachine),
			managed("kubectl-label", pathLabels, []string{"example.com/shared", "example.com/mine"})))
	got := PlanNode(Desired{MachineRemoved: removed}, n)
	want := []Change{
		{Kind: KindNodeLabel, Op: OpRemove, Key: key, From: "1"},
		{Kind: KindNodeLabel, Op: OpRelease, Key: "example.com/shared", From: "1", To: "1", With: []string{"kubectl-label"}},
		{Kind: KindTaint, Op: OpRemove, Key: key + ":NoSchedule", From: "1"},
	}
	if diff := cmp.Diff(want, got.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	after := applyPatch(t, n, got.Patch)
	if _, ok := after.Labels[key]; ok || after.Labels["example.com/shared"] != "1" || after.Labels["example.com/mine"] != "1" {
		t.Errorf("labels after the patch: %v", after.Labels)
	}
	if len(after.Spec.Taints) != 1 || after.Spec.Taints[0].Key != "example.com/other" {
		t.Errorf("taints after the patch: %v", after.Spec.Taints)
	}
	if again := PlanNode(Desired{}, after); !again.InSync() {
		t.Errorf("not in sync after the patch: %s", again.Patch)
	}
}
