package sync

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// A Machine created from the template while the pool declared
// example.com/team, example.com/cost and a taint, none of them recorded
// (the pool dropped them before this controller first planned it).
func TestPlanMachineDeliveredUnrecorded(t *testing.T) {
	creator := fieldpath.MakePathOrDie("metadata", "ownerReferences", fieldpath.KeyByFields("uid", "ms-uid"))
	spread := func(m *machinev1beta1.Machine) {
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet", Name: "ms", UID: "ms-uid", Controller: ptr.To(true)}}
	}
	gpu := taint("example.com/gpu", "1", corev1.TaintEffectNoSchedule)
	base := func(entries ...metav1.ManagedFieldsEntry) *machinev1beta1.Machine {
		m := newMachine("m", spread,
			machineLabels("example.com/cost", "1", "machine.openshift.io/cluster-api-machineset", "ms"),
			machineNodeLabels("example.com/team", "a"), machineTaints(gpu))
		m.ManagedFields = entries // none: as a trimmed cache serves it
		return m
	}
	template := managed("machineset-controller", pathLabels, []string{"example.com/cost", "machine.openshift.io/cluster-api-machineset"}, creator,
		fieldpath.MakePathOrDie("spec", "metadata", "labels", "example.com/team"), pathTaints)
	tests := map[string]struct {
		machine       *machinev1beta1.Machine
		wantChanges   []Change
		wantNeedsRead bool
	}{
		"untouched since the template: each goes, machine-api's label stays": {
			machine: base(template),
			wantChanges: []Change{
				{Kind: KindMachineLabel, Op: OpRemove, Key: "example.com/cost", From: "1", Delivered: true},
				{Kind: KindNodeLabel, Op: OpRemove, Key: "example.com/team", From: "a", Delivered: true},
				{Kind: KindTaint, Op: OpRemove, Key: "example.com/gpu:NoSchedule", From: "1", Delivered: true},
			},
		},
		"edited by hand since: nothing goes": {
			machine: base(
				managed("machineset-controller", pathLabels, []string{"machine.openshift.io/cluster-api-machineset"}, creator),
				managed("kubectl-edit", pathLabels, []string{"example.com/cost"}, fieldpath.MakePathOrDie("spec", "metadata", "labels", "example.com/team"), pathTaints)),
		},
		"no managedFields (a trimmed cache's copy): read it whole first": {
			machine:       base(),
			wantNeedsRead: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := PlanMachine(Desired{}, tc.machine)
			if diff := cmp.Diff(tc.wantChanges, got.Changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if got.NeedsRead != tc.wantNeedsRead {
				t.Errorf("NeedsRead %v, want %v", got.NeedsRead, tc.wantNeedsRead)
			}
			if tc.wantChanges == nil {
				if !got.InSync() {
					t.Errorf("a patch: %s", got.Patch)
				}
				return
			}
			after := applyPatch(t, tc.machine, got.Patch)
			if again := PlanMachine(Desired{}, after); !again.InSync() {
				t.Errorf("not in sync after applying the patch: %s", again.Patch)
			}
			if after.Labels["machine.openshift.io/cluster-api-machineset"] != "ms" {
				t.Errorf("machine-api's label went: %v", after.Labels)
			}
		})
	}
}

// Its Node holds nodelink's copies: those with the value the Machine's write
// removed go as recorded items do, a label someone else owns too stays.
func TestPlanNodeCopiesOfDeliveredItems(t *testing.T) {
	gpu := taint("example.com/gpu", "1", corev1.TaintEffectNoSchedule)
	removed := Reclaim{Labels: map[string]string{"example.com/team": "a", "example.com/role": "x"}, Taints: map[string]string{"example.com/gpu:NoSchedule": "1"}}
	n := newNode("n", nodeLabels("example.com/team", "a", "example.com/role", "x", "example.com/other", "b"), nodeTaints(gpu),
		nodeManaged(managed("nodelink-controller", pathLabels, []string{"example.com/team"}, pathNodeMachine),
			managed("kubelet", pathLabels, []string{"example.com/role", "example.com/other"})))
	got := PlanNode(Desired{MachineRemoved: removed}, n)
	want := []Change{
		{Kind: KindNodeLabel, Op: OpRelease, Key: "example.com/role", From: "x", To: "x", With: []string{"kubelet"}},
		{Kind: KindNodeLabel, Op: OpRemove, Key: "example.com/team", From: "a"},
		{Kind: KindTaint, Op: OpRemove, Key: "example.com/gpu:NoSchedule", From: "1"},
	}
	if diff := cmp.Diff(want, got.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	// A copy with another value is someone else's.
	other := newNode("n", nodeLabels("example.com/team", "b"), nodeManaged(managed("nodelink-controller", pathLabels, []string{"example.com/team"}, pathNodeMachine)))
	if got := PlanNode(Desired{MachineRemoved: removed}, other); !got.InSync() {
		t.Errorf("a copy with another value is planned: %+v", got.Changes)
	}
}

// SyncTarget hands the Machine's removals of delivered items to its Node's plan.
func TestRemovedFrom(t *testing.T) {
	got := removedFrom([]Change{
		{Kind: KindNodeLabel, Op: OpRemove, Key: "a", From: "1", Delivered: true},
		{Kind: KindNodeLabel, Op: OpRemove, Key: "b", From: "2"},
		{Kind: KindMachineLabel, Op: OpRemove, Key: "c", From: "3", Delivered: true},
		{Kind: KindTaint, Op: OpRemove, Key: "t:NoSchedule", From: "4", Delivered: true},
	})
	want := Reclaim{Labels: map[string]string{"a": "1"}, Taints: map[string]string{"t:NoSchedule": "4"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
