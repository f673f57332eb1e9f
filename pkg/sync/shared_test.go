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

// A label the pool stops declaring leaves a Node only if no one but the
// pool's delivery paths set it: this controller, or nodelink copying it from
// a Machine that no longer holds it.
func TestPlanNodeSharedLabels(t *testing.T) {
	const role = "node-role.kubernetes.io/worker"
	// The pool declared role and example.com/team; it now declares nothing.
	recorded := nodeAnnotations(AnnotationOwnedLabels, "example.com/team,"+role)
	labelled := nodeLabels(role, "", "example.com/team", "a", "kubernetes.io/hostname", "n")
	linker := managed("nodelink-controller", pathLabels, []string{"example.com/team"}, pathNodeMachine)
	tests := map[string]struct {
		node         *corev1.Node
		machineHolds map[string]string
		wantChanges  []Change
		wantPatch    string // "" means nil
		wantRead     bool
	}{
		"kubelet's role label stays; the controller's own label goes": {
			node: newNode("n", labelled, recorded, nodeManaged(
				managed("kubelet", pathLabels, []string{role, "kubernetes.io/hostname"}),
				ours(pathLabels, "example.com/team"))),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpRemove, Key: "example.com/team", From: "a"},
				{Kind: KindNodeLabel, Op: OpRelease, Key: role, To: "", With: []string{"kubelet"}},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null},"labels":{"example.com/team":null},"resourceVersion":"7"}}`,
		},
		"a label set by hand stays": {
			node: newNode("n", labelled, recorded, nodeManaged(
				managed("kubectl-label", pathLabels, []string{role, "example.com/team"}))),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpRelease, Key: "example.com/team", From: "a", To: "a", With: []string{"kubectl-label"}},
				{Kind: KindNodeLabel, Op: OpRelease, Key: role, To: "", With: []string{"kubectl-label"}},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null},"resourceVersion":"7"}}`,
		},
		"nodelink's copy goes once the Machine no longer holds it": {
			node: newNode("n", labelled, recorded, nodeManaged(linker, managed("kubelet", pathLabels, []string{role}))),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpRemove, Key: "example.com/team", From: "a"},
				{Kind: KindNodeLabel, Op: OpRelease, Key: role, To: "", With: []string{"kubelet"}},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null},"labels":{"example.com/team":null},"resourceVersion":"7"}}`,
		},
		"nodelink's copy stays while the Machine holds it (someone else's there)": {
			node:         newNode("n", labelled, recorded, nodeManaged(linker, ours(pathLabels, role))),
			machineHolds: map[string]string{"example.com/team": "a"},
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpRelease, Key: "example.com/team", From: "a", To: "a", With: []string{"nodelink-controller"}},
				{Kind: KindNodeLabel, Op: OpRemove, Key: role},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null},"labels":{"node-role.kubernetes.io/worker":null},"resourceVersion":"7"}}`,
		},
		"a label no manager owns (older than managedFields) stays": {
			node: newNode("n", labelled, recorded, nodeManaged(ours(pathLabels, role))),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpRelease, Key: "example.com/team", From: "a", To: "a", With: []string{"unknown"}},
				{Kind: KindNodeLabel, Op: OpRemove, Key: role},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null},"labels":{"node-role.kubernetes.io/worker":null},"resourceVersion":"7"}}`,
		},
		"co-owned by the controller and someone else (server-side apply): stays": {
			node: newNode("n", labelled, recorded, nodeManaged(
				ours(pathLabels, role, "example.com/team"), managed("gitops", pathLabels, []string{"example.com/team"}))),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpRelease, Key: "example.com/team", From: "a", To: "a", With: []string{"gitops"}},
				{Kind: KindNodeLabel, Op: OpRemove, Key: role},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null},"labels":{"node-role.kubernetes.io/worker":null},"resourceVersion":"7"}}`,
		},
		"read from a trimmed cache (no managedFields): nothing decided, nothing written": {
			node:     newNode("n", labelled, recorded),
			wantRead: true,
		},
		"without managedFields, the rest of the plan still goes, the record kept": {
			node: newNode("n", labelled, recorded, nodeTaints(taint("t", "", noSchedule)),
				nodeAnnotations(AnnotationOwnedLabels, "example.com/team,"+role, AnnotationOwnedTaints, "t:NoSchedule")),
			wantChanges: []Change{{Kind: KindTaint, Op: OpRemove, Key: "t:NoSchedule"}},
			wantPatch:   `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-taints":null},"resourceVersion":"7"},"spec":{"taints":null}}`,
			wantRead:    true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := PlanNode(Desired{MachineNodeLabels: tc.machineHolds}, tc.node)
			if diff := cmp.Diff(tc.wantChanges, got.Changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPatch, string(got.Patch)); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
			if got.NeedsRead != tc.wantRead {
				t.Errorf("NeedsRead = %v, want %v", got.NeedsRead, tc.wantRead)
			}
			if got.InSync() {
				return
			}
			after := applyPatch(t, tc.node, got.Patch)
			if again := PlanNode(Desired{MachineNodeLabels: tc.machineHolds}, after); !again.InSync() {
				t.Errorf("not in sync after applying the patch: %s", again.Patch)
			}
		})
	}
}

// On a Machine, the manager that created it from the MachineSet's template
// (the owner of its controller ownerReference) delivers the pool's items.
func TestPlanMachineSharedLabels(t *testing.T) {
	controller := func(m *machinev1beta1.Machine) {
		m.OwnerReferences = []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: "other", UID: "other-uid"},
			{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet", Name: "ms", UID: "ms-uid", Controller: ptr.To(true)},
		}
	}
	ownerRef := func(uid string) fieldpath.Path {
		return fieldpath.MakePathOrDie("metadata", "ownerReferences", fieldpath.KeyByFields("uid", uid))
	}
	base := func(entries ...metav1.ManagedFieldsEntry) *machinev1beta1.Machine {
		return newMachine("m", controller,
			machineLabels("example.com/cost", "1"), machineNodeLabels("example.com/team", "a"),
			machineAnnotations(AnnotationOwnedMachineLabels, "example.com/cost", AnnotationOwnedLabels, "example.com/team"),
			machineManaged(entries...))
	}
	tests := map[string]struct {
		machine     *machinev1beta1.Machine
		wantChanges []Change
	}{
		"created from the template with both: both go": {
			machine: base(
				managed("machineset-controller", pathLabels, []string{"example.com/cost"}, ownerRef("ms-uid"),
					fieldpath.MakePathOrDie("spec", "metadata", "labels", "example.com/team"))),
			wantChanges: []Change{
				{Kind: KindMachineLabel, Op: OpRemove, Key: "example.com/cost", From: "1"},
				{Kind: KindNodeLabel, Op: OpRemove, Key: "example.com/team", From: "a"},
			},
		},
		"the owner of another ownerReference delivers nothing": {
			machine: base(
				managed("someone", pathLabels, []string{"example.com/cost"}, ownerRef("other-uid")),
				ours(pathMachineNodeLabels, "example.com/team")),
			wantChanges: []Change{
				{Kind: KindMachineLabel, Op: OpRelease, Key: "example.com/cost", From: "1", To: "1", With: []string{"someone"}},
				{Kind: KindNodeLabel, Op: OpRemove, Key: "example.com/team", From: "a"},
			},
		},
		"edited by hand on the Machine: both stay": {
			machine: base(
				managed("machineset-controller", nil, nil, ownerRef("ms-uid")),
				managed("kubectl-edit", pathLabels, []string{"example.com/cost"}, fieldpath.MakePathOrDie("spec", "metadata", "labels", "example.com/team"))),
			wantChanges: []Change{
				{Kind: KindMachineLabel, Op: OpRelease, Key: "example.com/cost", From: "1", To: "1", With: []string{"kubectl-edit"}},
				{Kind: KindNodeLabel, Op: OpRelease, Key: "example.com/team", From: "a", To: "a", With: []string{"kubectl-edit"}},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := PlanMachine(Desired{}, tc.machine)
			if diff := cmp.Diff(tc.wantChanges, got.Changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if got.NeedsRead || got.InSync() {
				t.Fatalf("NeedsRead %v, InSync %v: want a patch", got.NeedsRead, got.InSync())
			}
			if again := PlanMachine(Desired{}, applyPatch(t, tc.machine, got.Patch)); !again.InSync() {
				t.Errorf("not in sync after applying the patch: %s", again.Patch)
			}
		})
	}
}
