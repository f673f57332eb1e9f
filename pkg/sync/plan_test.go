package sync

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
)

const infra = "node-role.kubernetes.io/infra"

func TestPlanNode(t *testing.T) {
	poolInfra := Desired{
		Labels: map[string]string{infra: "", "example.com/team": "a"},
		Taints: []corev1.Taint{taint(infra, "reserved", noSchedule)},
	}
	tests := map[string]struct {
		desired     Desired
		node        *corev1.Node
		wantChanges []Change
		wantPatch   string // "" means nil
		wantTaints  []corev1.Taint
	}{
		"in-sync object yields nil patch": {
			desired: poolInfra,
			node: newNode("n",
				nodeLabels(infra, "", "example.com/team", "a", "kubernetes.io/hostname", "n"),
				nodeAnnotations(AnnotationOwnedLabels, "example.com/team,"+infra, AnnotationOwnedTaints, infra+":NoSchedule"),
				nodeTaints(taint(infra, "reserved", noSchedule), taint("node.kubernetes.io/unschedulable", "", noSchedule))),
			wantTaints: []corev1.Taint{taint(infra, "reserved", noSchedule), taint("node.kubernetes.io/unschedulable", "", noSchedule)},
		},
		"empty pool on a clean node yields nil patch": {
			node:       newNode("n", nodeLabels("a", "1"), nodeTaints(taint("x", "", noSchedule))),
			wantTaints: []corev1.Taint{taint("x", "", noSchedule)},
		},
		"add to a bare node; patch carries resourceVersion": {
			desired: poolInfra,
			node:    newNode("n"),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpAdd, Key: "example.com/team", To: "a"},
				{Kind: KindNodeLabel, Op: OpAdd, Key: infra},
				{Kind: KindTaint, Op: OpAdd, Key: infra + ":NoSchedule", To: "reserved"},
			},
			wantPatch:  `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":"example.com/team,node-role.kubernetes.io/infra","hub-node-metadata.openshift.io/owned-taints":"node-role.kubernetes.io/infra:NoSchedule"},"labels":{"example.com/team":"a","node-role.kubernetes.io/infra":""},"resourceVersion":"7"},"spec":{"taints":[{"key":"node-role.kubernetes.io/infra","value":"reserved","effect":"NoSchedule"}]}}`,
			wantTaints: []corev1.Taint{taint(infra, "reserved", noSchedule)},
		},
		"adopt: present with the wanted value, not recorded": {
			desired: Desired{Labels: map[string]string{"a": "1"}, Taints: []corev1.Taint{taint("t", "v", noExecute)}},
			node:    newNode("n", nodeLabels("a", "1"), nodeTaints(timedTaint("t", "v", noExecute))),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpAdopt, Key: "a", From: "1", To: "1"},
				{Kind: KindTaint, Op: OpAdopt, Key: "t:NoExecute", From: "v", To: "v"},
			},
			wantPatch:  `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":"a","hub-node-metadata.openshift.io/owned-taints":"t:NoExecute"},"resourceVersion":"7"}}`,
			wantTaints: []corev1.Taint{timedTaint("t", "v", noExecute)},
		},
		"override of a foreign value is reported": {
			desired: Desired{Labels: map[string]string{"a": "pool"}, Taints: []corev1.Taint{taint("t", "pool", noSchedule)}},
			node:    newNode("n", nodeLabels("a", "user"), nodeTaints(taint("t", "user", noSchedule))),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpOverride, Key: "a", From: "user", To: "pool"},
				{Kind: KindTaint, Op: OpOverride, Key: "t:NoSchedule", From: "user", To: "pool"},
			},
			wantPatch:  `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":"a","hub-node-metadata.openshift.io/owned-taints":"t:NoSchedule"},"labels":{"a":"pool"},"resourceVersion":"7"},"spec":{"taints":[{"key":"t","value":"pool","effect":"NoSchedule"}]}}`,
			wantTaints: []corev1.Taint{taint("t", "pool", noSchedule)},
		},
		"update of an owned label value": {
			desired: Desired{Labels: map[string]string{"a": "2"}},
			node:    newNode("n", nodeLabels("a", "1"), nodeAnnotations(AnnotationOwnedLabels, "a")),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpUpdate, Key: "a", From: "1", To: "2"},
			},
			wantPatch: `{"metadata":{"labels":{"a":"2"},"resourceVersion":"7"}}`,
		},
		"MNMO defect b: a taint value change reaches the node": {
			desired: Desired{Taints: []corev1.Taint{taint("dedicated", "gpu", noSchedule)}},
			node: newNode("n", nodeAnnotations(AnnotationOwnedTaints, "dedicated:NoSchedule"),
				nodeTaints(taint("dedicated", "cpu", noSchedule))),
			wantChanges: []Change{
				{Kind: KindTaint, Op: OpUpdate, Key: "dedicated:NoSchedule", From: "cpu", To: "gpu"},
			},
			wantPatch:  `{"metadata":{"resourceVersion":"7"},"spec":{"taints":[{"key":"dedicated","value":"gpu","effect":"NoSchedule"}]}}`,
			wantTaints: []corev1.Taint{taint("dedicated", "gpu", noSchedule)},
		},
		"MNMO defect a: other components' taints are kept, in place": {
			desired: Desired{Taints: []corev1.Taint{taint(infra, "", noSchedule)}},
			node: newNode("n", nodeAnnotations(AnnotationOwnedTaints, "old:NoSchedule"),
				nodeTaints(
					timedTaint("node.kubernetes.io/unschedulable", "", noSchedule),
					taint("old", "", noSchedule),
					timedTaint("medik8s.io/drain", "", noExecute),
					taint("nvidia.com/gpu", "present", noSchedule),
					taint("ToBeDeletedByClusterAutoscaler", "1700000000", noSchedule),
				)),
			wantChanges: []Change{
				{Kind: KindTaint, Op: OpRemove, Key: "old:NoSchedule"},
				{Kind: KindTaint, Op: OpAdd, Key: infra + ":NoSchedule"},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-taints":"node-role.kubernetes.io/infra:NoSchedule"},"resourceVersion":"7"},"spec":{"taints":[{"key":"node.kubernetes.io/unschedulable","effect":"NoSchedule","timeAdded":"2026-01-02T03:04:05Z"},{"key":"medik8s.io/drain","effect":"NoExecute","timeAdded":"2026-01-02T03:04:05Z"},{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"},{"key":"ToBeDeletedByClusterAutoscaler","value":"1700000000","effect":"NoSchedule"},{"key":"node-role.kubernetes.io/infra","effect":"NoSchedule"}]}}`,
			wantTaints: []corev1.Taint{
				timedTaint("node.kubernetes.io/unschedulable", "", noSchedule),
				timedTaint("medik8s.io/drain", "", noExecute),
				taint("nvidia.com/gpu", "present", noSchedule),
				taint("ToBeDeletedByClusterAutoscaler", "1700000000", noSchedule),
				taint(infra, "", noSchedule),
			},
		},
		"foreign order, TimeAdded and foreign duplicates preserved; declared updated in place": {
			desired: Desired{Taints: []corev1.Taint{taint("t", "new", noExecute)}},
			node: newNode("n", nodeAnnotations(AnnotationOwnedTaints, "t:NoExecute"),
				nodeTaints(
					timedTaint("f1", "a", noSchedule),
					timedTaint("t", "old", noExecute),
					timedTaint("f1", "a", noSchedule),
					taint("t", "other", noSchedule), // same key, other effect: foreign
				)),
			wantChanges: []Change{
				{Kind: KindTaint, Op: OpUpdate, Key: "t:NoExecute", From: "old", To: "new"},
			},
			wantPatch: `{"metadata":{"resourceVersion":"7"},"spec":{"taints":[{"key":"f1","value":"a","effect":"NoSchedule","timeAdded":"2026-01-02T03:04:05Z"},{"key":"t","value":"new","effect":"NoExecute","timeAdded":"2026-01-02T03:04:05Z"},{"key":"f1","value":"a","effect":"NoSchedule","timeAdded":"2026-01-02T03:04:05Z"},{"key":"t","value":"other","effect":"NoSchedule"}]}}`,
			wantTaints: []corev1.Taint{
				timedTaint("f1", "a", noSchedule),
				timedTaint("t", "new", noExecute),
				timedTaint("f1", "a", noSchedule),
				taint("t", "other", noSchedule),
			},
		},
		"dedupe: later copies of a declared taint are removed": {
			desired: Desired{Taints: []corev1.Taint{taint("t", "v", noSchedule)}},
			node: newNode("n", nodeAnnotations(AnnotationOwnedTaints, "t:NoSchedule"),
				nodeTaints(taint("t", "v", noSchedule), taint("f", "", noSchedule), taint("t", "w", noSchedule))),
			wantChanges: []Change{
				{Kind: KindTaint, Op: OpDedupe, Key: "t:NoSchedule", From: "w"},
			},
			wantPatch:  `{"metadata":{"resourceVersion":"7"},"spec":{"taints":[{"key":"t","value":"v","effect":"NoSchedule"},{"key":"f","effect":"NoSchedule"}]}}`,
			wantTaints: []corev1.Taint{taint("t", "v", noSchedule), taint("f", "", noSchedule)},
		},
		"removal only of owned items; owned but absent dropped from the record": {
			desired: Desired{Labels: map[string]string{"a": "1"}},
			node: newNode("n", nodeLabels("a", "1", "b", "2", "c", "3"),
				nodeAnnotations(AnnotationOwnedLabels, "a,b,gone"), nodeManaged(ours(pathLabels, "a", "b"))),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpRemove, Key: "b", From: "2"},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":"a"},"labels":{"b":null},"resourceVersion":"7"}}`,
		},
		"annotation removed when nothing is owned any more": {
			node: newNode("n", nodeLabels("a", "1"), nodeAnnotations(AnnotationOwnedLabels, "a", AnnotationOwnedTaints, "t:NoSchedule"),
				nodeTaints(taint("t", "", noSchedule)), nodeManaged(ours(pathLabels, "a"))),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpRemove, Key: "a", From: "1"},
				{Kind: KindTaint, Op: OpRemove, Key: "t:NoSchedule"},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null,"hub-node-metadata.openshift.io/owned-taints":null},"labels":{"a":null},"resourceVersion":"7"},"spec":{"taints":null}}`,
		},
		"empty owned annotation is removed": {
			node:      newNode("n", nodeAnnotations(AnnotationOwnedLabels, "")),
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null},"resourceVersion":"7"}}`,
		},
		"malformed owned annotations are tolerated: bad and reserved entries are never owned": {
			node: newNode("n",
				nodeLabels("b", "2", "kubernetes.io/hostname", "n", "bad key!", "x"),
				nodeAnnotations(
					AnnotationOwnedLabels, " b , ,bad key!,kubernetes.io/hostname,,",
					AnnotationOwnedTaints, "t:Bogus,:NoSchedule,nocolon,node.kubernetes.io/unschedulable:NoSchedule,g:NoExecute"),
				nodeTaints(taint("t", "", "Bogus"), taint("node.kubernetes.io/unschedulable", "", noSchedule), taint("g", "", noExecute)),
				nodeManaged(ours(pathLabels, "b"))),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpRemove, Key: "b", From: "2"},
				{Kind: KindTaint, Op: OpRemove, Key: "g:NoExecute"},
			},
			wantPatch:  `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null,"hub-node-metadata.openshift.io/owned-taints":null},"labels":{"b":null},"resourceVersion":"7"},"spec":{"taints":[{"key":"t","effect":"Bogus"},{"key":"node.kubernetes.io/unschedulable","effect":"NoSchedule"}]}}`,
			wantTaints: []corev1.Taint{taint("t", "", "Bogus"), taint("node.kubernetes.io/unschedulable", "", noSchedule)},
		},
		"unsorted record is rewritten without changes": {
			desired:   Desired{Labels: map[string]string{"a": "1", "b": "1"}},
			node:      newNode("n", nodeLabels("a", "1", "b", "1"), nodeAnnotations(AnnotationOwnedLabels, "b,a")),
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":"a,b"},"resourceVersion":"7"}}`,
		},
		"hand-built Desired with duplicate taints: first value wins": {
			desired: Desired{Taints: []corev1.Taint{taint("t", "first", noSchedule), taint("t", "second", noSchedule)}},
			node:    newNode("n"),
			wantChanges: []Change{
				{Kind: KindTaint, Op: OpAdd, Key: "t:NoSchedule", To: "first"},
			},
			wantPatch:  `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-taints":"t:NoSchedule"},"resourceVersion":"7"},"spec":{"taints":[{"key":"t","value":"first","effect":"NoSchedule"}]}}`,
			wantTaints: []corev1.Taint{taint("t", "first", noSchedule)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := tc.node.DeepCopy()
			got := PlanNode(tc.desired, tc.node)
			if diff := cmp.Diff(tc.wantChanges, got.Changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPatch, string(got.Patch)); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
			if got.InSync() != (tc.wantPatch == "") {
				t.Errorf("InSync() = %v", got.InSync())
			}
			if diff := cmp.Diff(before, tc.node); diff != "" {
				t.Errorf("PlanNode modified its input (-before +after):\n%s", diff)
			}
			after := tc.node
			if !got.InSync() {
				after = applyPatch(t, tc.node, got.Patch)
			}
			if diff := cmp.Diff(tc.wantTaints, after.Spec.Taints); diff != "" {
				t.Errorf("taints after patch (-want +got):\n%s", diff)
			}
			if again := PlanNode(tc.desired, after); !again.InSync() {
				t.Errorf("not in sync after applying the patch: %s", again.Patch)
			}
		})
	}
}

// MNMO defect c: its shared map let one node's user-set label suppress that
// label on later nodes. Each object is planned on its own.
func TestPlanNodeIndependentPerNode(t *testing.T) {
	d := Desired{Labels: map[string]string{"example.com/tier": "gold"}}
	want := d.Labels["example.com/tier"]
	first := newNode("first", nodeLabels("example.com/tier", "user"))
	second := newNode("second")

	got1 := PlanNode(d, first)
	got2 := PlanNode(d, second)

	if diff := cmp.Diff([]Change{{Kind: KindNodeLabel, Op: OpOverride, Key: "example.com/tier", From: "user", To: "gold"}}, got1.Changes); diff != "" {
		t.Errorf("first node (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Change{{Kind: KindNodeLabel, Op: OpAdd, Key: "example.com/tier", To: "gold"}}, got2.Changes); diff != "" {
		t.Errorf("second node (-want +got):\n%s", diff)
	}
	if d.Labels["example.com/tier"] != want || len(d.Labels) != 1 {
		t.Errorf("Desired was modified: %v", d.Labels)
	}
	if got := applyPatch(t, second, got2.Patch).Labels["example.com/tier"]; got != "gold" {
		t.Errorf("second node label = %q, want gold", got)
	}
}

func TestPlanMachine(t *testing.T) {
	pool := Desired{
		Labels:        map[string]string{infra: ""},
		MachineLabels: map[string]string{"example.com/cost-center": "42"},
		Taints:        []corev1.Taint{taint(infra, "", noSchedule)},
	}
	tests := map[string]struct {
		desired     Desired
		machine     *machinev1beta1.Machine
		wantChanges []Change
		wantPatch   string
	}{
		"nil spec.metadata labels handled; each place gets its own record": {
			desired: pool,
			machine: newMachine("m", machineLabels(LabelMachineSet, "ms")),
			wantChanges: []Change{
				{Kind: KindMachineLabel, Op: OpAdd, Key: "example.com/cost-center", To: "42"},
				{Kind: KindNodeLabel, Op: OpAdd, Key: infra},
				{Kind: KindTaint, Op: OpAdd, Key: infra + ":NoSchedule"},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":"node-role.kubernetes.io/infra","hub-node-metadata.openshift.io/owned-machine-labels":"example.com/cost-center","hub-node-metadata.openshift.io/owned-taints":"node-role.kubernetes.io/infra:NoSchedule"},"labels":{"example.com/cost-center":"42"},"resourceVersion":"9"},"spec":{"metadata":{"labels":{"node-role.kubernetes.io/infra":""}},"taints":[{"key":"node-role.kubernetes.io/infra","effect":"NoSchedule"}]}}`,
		},
		"in-sync machine yields nil patch": {
			desired: pool,
			machine: newMachine("m",
				machineLabels(LabelMachineSet, "ms", "example.com/cost-center", "42"),
				machineNodeLabels(infra, "", "user", "x"),
				machineTaints(taint("foreign", "", noExecute), taint(infra, "", noSchedule)),
				machineAnnotations(
					AnnotationOwnedLabels, infra,
					AnnotationOwnedMachineLabels, "example.com/cost-center",
					AnnotationOwnedTaints, infra+":NoSchedule")),
		},
		"machine labels and node labels are owned separately": {
			desired: Desired{Labels: map[string]string{"k": "node"}},
			machine: newMachine("m",
				machineLabels("k", "machine", "old", "1"),
				machineNodeLabels("k", "node", "old", "1"),
				machineAnnotations(AnnotationOwnedMachineLabels, "old", AnnotationOwnedLabels, "k"),
				machineManaged(ours(pathLabels, "old"))),
			wantChanges: []Change{
				{Kind: KindMachineLabel, Op: OpRemove, Key: "old", From: "1"},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-machine-labels":null},"labels":{"old":null},"resourceVersion":"9"}}`,
		},
		"spec.metadata label update and taint removal": {
			desired: Desired{Labels: map[string]string{"a": "2"}},
			machine: newMachine("m",
				machineNodeLabels("a", "1"),
				machineTaints(taint("t", "", noSchedule), taint("f", "", noSchedule)),
				machineAnnotations(AnnotationOwnedLabels, "a", AnnotationOwnedTaints, "t:NoSchedule")),
			wantChanges: []Change{
				{Kind: KindNodeLabel, Op: OpUpdate, Key: "a", From: "1", To: "2"},
				{Kind: KindTaint, Op: OpRemove, Key: "t:NoSchedule"},
			},
			wantPatch: `{"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-taints":null},"resourceVersion":"9"},"spec":{"metadata":{"labels":{"a":"2"}},"taints":[{"key":"f","effect":"NoSchedule"}]}}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := tc.machine.DeepCopy()
			got := PlanMachine(tc.desired, tc.machine)
			if diff := cmp.Diff(tc.wantChanges, got.Changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPatch, string(got.Patch)); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.machine); diff != "" {
				t.Errorf("PlanMachine modified its input (-before +after):\n%s", diff)
			}
			if !got.InSync() {
				after := applyPatch(t, tc.machine, got.Patch)
				if again := PlanMachine(tc.desired, after); !again.InSync() {
					t.Errorf("not in sync after applying the patch: %s", again.Patch)
				}
			}
		})
	}
}
