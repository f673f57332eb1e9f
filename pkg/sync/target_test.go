package sync

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func machineSet(name, pool string, uid types.UID) machinev1beta1.MachineSet {
	return machinev1beta1.MachineSet{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: MachineAPINamespace, UID: uid,
		Labels: map[string]string{LabelMachinePool: pool},
	}}
}

// member is a Machine of MachineSet ms (label and controller reference).
func member(name, ms string, uid types.UID, nodeName string) machineOpt {
	return func(m *machinev1beta1.Machine) {
		m.Name = name
		m.Labels = map[string]string{LabelMachineSet: ms}
		m.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet", Name: ms, UID: uid, Controller: new(true),
		}}
		if nodeName != "" {
			m.Status.NodeRef = &corev1.ObjectReference{Kind: "Node", Name: nodeName}
		}
	}
}

func TestTargets(t *testing.T) {
	deleting := metav1.NewTime(t0.Time)
	sets := []machinev1beta1.MachineSet{
		machineSet("infra-a", "infra", "uid-a"),
		machineSet("infra-b", "infra", "uid-b"),
		machineSet("worker-a", "worker", "uid-w"),
		func() machinev1beta1.MachineSet { // right label, wrong namespace
			ms := machineSet("infra-x", "infra", "uid-x")
			ms.Namespace = "elsewhere"
			return ms
		}(),
	}
	m := func(opts ...machineOpt) machinev1beta1.Machine { return *newMachine("", opts...) }
	machines := []machinev1beta1.Machine{
		m(member("m-linked", "infra-a", "uid-a", "n-linked")),
		m(member("m-annotated-ok", "infra-b", "uid-b", "n-annotated-ok"), func(m *machinev1beta1.Machine) { m.Spec.ProviderID = new("aws:///i-1") }),
		m(member("m-no-ref", "infra-a", "uid-a", "")),
		m(member("m-no-node", "infra-a", "uid-a", "n-missing")),
		m(member("m-other-annotation", "infra-a", "uid-a", "n-other")),
		m(member("m-other-provider", "infra-a", "uid-a", "n-provider"), func(m *machinev1beta1.Machine) { m.Spec.ProviderID = new("aws:///i-2") }),
		m(member("m-node-deleting", "infra-a", "uid-a", "n-deleting")),
		m(member("m-deleting", "infra-a", "uid-a", "n-linked"), func(m *machinev1beta1.Machine) { m.DeletionTimestamp = &deleting }),
		m(member("m-worker", "worker-a", "uid-w", "n-w")),
		m(member("m-stale-uid", "infra-a", "uid-old", "n-linked")),
		m(member("m-not-controller", "infra-a", "uid-a", "n-linked"), func(m *machinev1beta1.Machine) { m.OwnerReferences[0].Controller = new(false) }),
		m(member("m-wrong-kind", "infra-a", "uid-a", "n-linked"), func(m *machinev1beta1.Machine) { m.OwnerReferences[0].Kind = "ControlPlaneMachineSet" }),
		m(member("m-label-only", "infra-a", "uid-a", "n-linked"), func(m *machinev1beta1.Machine) { m.OwnerReferences = nil }),
		m(member("m-owner-is-other-set", "infra-a", "uid-b", "n-linked"), func(m *machinev1beta1.Machine) { m.OwnerReferences[0].Name = "infra-b" }),
		m(member("m-other-namespace", "infra-x", "uid-x", "n-linked")),
	}
	node := func(name string, opts ...nodeOpt) corev1.Node { return *newNode(name, opts...) }
	nodes := []corev1.Node{
		node("n-linked"),
		node("n-annotated-ok", nodeAnnotations(AnnotationNodeMachine, MachineAPINamespace+"/m-annotated-ok"), func(n *corev1.Node) { n.Spec.ProviderID = "aws:///i-1" }),
		node("n-other", nodeAnnotations(AnnotationNodeMachine, MachineAPINamespace+"/someone-else")),
		node("n-provider", func(n *corev1.Node) { n.Spec.ProviderID = "aws:///i-9" }),
		node("n-deleting", func(n *corev1.Node) { n.DeletionTimestamp = &deleting; n.Finalizers = []string{"x"} }),
		node("n-w"),
	}

	type row struct{ machine, node, skip string }
	want := []row{
		{"m-annotated-ok", "n-annotated-ok", ""},
		{"m-linked", "n-linked", ""},
		{"m-no-node", "", NodeSkipNotFound},
		{"m-no-ref", "", NodeSkipNoNodeRef},
		{"m-node-deleting", "", NodeSkipDeleting},
		{"m-other-annotation", "", NodeSkipOtherMachine},
		{"m-other-provider", "", NodeSkipOtherMachine},
	}
	var got []row
	for _, tg := range Targets("infra", sets, machines, nodes) {
		if tg.Pool != "infra" {
			t.Errorf("Pool = %q", tg.Pool)
		}
		r := row{machine: tg.Machine.Name, skip: tg.NodeSkip}
		if tg.Node != nil {
			r.node = tg.Node.Name
		}
		got = append(got, r)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(row{})); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}

	if got := Targets("absent", sets, machines, nodes); len(got) != 0 {
		t.Errorf("a pool without MachineSets has targets: %v", got)
	}
}
