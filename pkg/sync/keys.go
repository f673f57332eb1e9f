package sync

// Keys this package reads or writes, named once. The owned-* annotations are
// this controller's bookkeeping: they record exactly what it applied, so that
// it removes only what it applied (see the package documentation).
const (
	// AnnotationOwnedLabels records the label keys this controller applied.
	// On a Node: keys in metadata.labels. On a Machine: keys in
	// spec.metadata.labels (the labels nodelink copies onto the Node).
	AnnotationOwnedLabels = "hub-node-metadata.openshift.io/owned-labels"

	// AnnotationOwnedTaints records the taints this controller applied, as
	// key:Effect, on a Node (spec.taints) and on a Machine (spec.taints).
	AnnotationOwnedTaints = "hub-node-metadata.openshift.io/owned-taints"

	// AnnotationOwnedMachineLabels records the label keys this controller
	// applied in a Machine's own metadata.labels.
	AnnotationOwnedMachineLabels = "hub-node-metadata.openshift.io/owned-machine-labels"

	// LabelMachinePool is the label Hive puts on the spoke MachineSets of a
	// MachinePool; its value is the pool's spec.name.
	LabelMachinePool = "hive.openshift.io/machine-pool"

	// LabelMachineSet is the label machine-api puts on a Machine; its value
	// is the name of the MachineSet that created it.
	LabelMachineSet = "machine.openshift.io/cluster-api-machineset"

	// AnnotationNodeMachine is the annotation the machine-api nodelink
	// controller puts on a Node: "<namespace>/<machine name>".
	AnnotationNodeMachine = "machine.openshift.io/machine"

	// MachineAPINamespace is the spoke namespace of MachineSets and Machines.
	MachineAPINamespace = "openshift-machine-api"
)

// Owned-* annotation encoding: entries sorted, joined by ownedSeparator, no
// spaces; a taint entry is key + taintEffectSeparator + Effect.
const (
	ownedSeparator       = ","
	taintEffectSeparator = ":"
)
