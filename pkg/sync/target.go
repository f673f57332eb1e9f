package sync

import (
	"sort"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
)

// Reasons a Target's Node is not targeted. Stable strings, fit for metrics.
const (
	// NodeSkipNoNodeRef: the Machine has no status.nodeRef yet.
	NodeSkipNoNodeRef = "NoNodeRef"
	// NodeSkipNotFound: no Node has the name in the Machine's nodeRef.
	NodeSkipNotFound = "NodeNotFound"
	// NodeSkipOtherMachine: the Node belongs to another Machine (its
	// machine.openshift.io/machine annotation names another Machine, or its
	// providerID differs from the Machine's).
	NodeSkipOtherMachine = "NodeOfOtherMachine"
	// NodeSkipDeleting: the Node is being deleted.
	NodeSkipDeleting = "NodeDeleting"
)

// Target is one Machine of a pool and, when it is safe to write, its Node.
// Machine and Node point into the slices given to Targets.
type Target struct {
	// Pool is the MachinePool's spec.name.
	Pool    string
	Machine *machinev1beta1.Machine
	// MachineSet is the Machine's controller, as the caller listed it (its
	// metadata may be all there is).
	MachineSet *machinev1beta1.MachineSet
	// Node is nil when NodeSkip says why it is not targeted.
	Node     *corev1.Node
	NodeSkip string
}

// Targets maps a pool to its Machines and their Nodes on one spoke:
//
//   - MachineSets in MachineAPINamespace labelled LabelMachinePool=poolName;
//   - their Machines: labelled LabelMachineSet=<MachineSet name> and
//     controlled (ownerReference with Controller=true, kind MachineSet, same
//     name and UID) by that MachineSet; Machines being deleted are left out;
//   - each Machine's Node, named by status.nodeRef.name, unless NodeSkip says
//     otherwise. A Node is accepted when its AnnotationNodeMachine names this
//     Machine, or when it has no such annotation (nodelink has not run yet);
//     in both cases it is refused if the Node's and the Machine's providerIDs
//     are both set and differ.
//
// The result is sorted by Machine name.
func Targets(poolName string, machineSets []machinev1beta1.MachineSet, machines []machinev1beta1.Machine, nodes []corev1.Node) []Target {
	pools := map[string]*machinev1beta1.MachineSet{} // MachineSet name -> MachineSet
	for i := range machineSets {
		ms := &machineSets[i]
		if ms.Namespace == MachineAPINamespace && ms.Labels[LabelMachinePool] == poolName {
			pools[ms.Name] = ms
		}
	}
	nodeByName := make(map[string]*corev1.Node, len(nodes))
	for i := range nodes {
		nodeByName[nodes[i].Name] = &nodes[i]
	}

	var targets []Target
	for i := range machines {
		m := &machines[i]
		ms, ok := pools[m.Labels[LabelMachineSet]]
		if !ok || m.Namespace != ms.Namespace || !controlledBy(m, ms) || m.DeletionTimestamp != nil {
			continue
		}
		t := Target{Pool: poolName, Machine: m, MachineSet: ms}
		t.Node, t.NodeSkip = nodeOf(m, nodeByName)
		targets = append(targets, t)
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].Machine.Name < targets[j].Machine.Name })
	return targets
}

func controlledBy(m *machinev1beta1.Machine, ms *machinev1beta1.MachineSet) bool {
	for _, ref := range m.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			return ref.Kind == "MachineSet" && ref.Name == ms.Name && ref.UID == ms.UID
		}
	}
	return false
}

func nodeOf(m *machinev1beta1.Machine, nodes map[string]*corev1.Node) (*corev1.Node, string) {
	if m.Status.NodeRef == nil || m.Status.NodeRef.Name == "" {
		return nil, NodeSkipNoNodeRef
	}
	n, ok := nodes[m.Status.NodeRef.Name]
	if !ok {
		return nil, NodeSkipNotFound
	}
	if owner, annotated := n.Annotations[AnnotationNodeMachine]; annotated && owner != m.Namespace+"/"+m.Name {
		return nil, NodeSkipOtherMachine
	}
	if m.Spec.ProviderID != nil && *m.Spec.ProviderID != "" && n.Spec.ProviderID != "" && *m.Spec.ProviderID != n.Spec.ProviderID {
		return nil, NodeSkipOtherMachine
	}
	if n.DeletionTimestamp != nil {
		return nil, NodeSkipDeleting
	}
	return n, ""
}
