package sync

// Every label and annotation key the project reads or writes, named once
// here; pkg/remote, pkg/fleet and the test harness import them. The owned-*
// annotations are this controller's bookkeeping: they record exactly what it
// applied, so that it removes only what it applied (see the package
// documentation).
const (
	// KeyPrefix starts every key this controller owns.
	KeyPrefix = "hub-node-metadata.openshift.io/"

	// FieldManager is the field manager every write of this controller
	// names, so that a spoke's managedFields tell its items from the same
	// items set by others (see "Shared items" in doc.go).
	FieldManager = "hub-node-metadata"

	// AnnotationPaused, set to "true" on a MachinePool or a
	// ClusterDeployment, makes the controller leave that pool (or every pool
	// of that cluster) alone: it reads nothing from the spoke and writes
	// nothing. Its MachinePoolSync shows Phase Paused.
	AnnotationPaused = KeyPrefix + "paused"

	// AnnotationNoExecuteBatch is how many Nodes of the pool get a new or
	// changed NoExecute taint at a time: a count ("3"), a percentage of the
	// pool's Nodes ("25%", rounded down, at least 1), or "all" (no pacing).
	AnnotationNoExecuteBatch = KeyPrefix + "noexecute-batch"
	// AnnotationNoExecuteInterval is the wait after a batch is written
	// before the next one: a duration ("2m", "30s"), or "all" (no pacing).
	AnnotationNoExecuteInterval = KeyPrefix + "noexecute-interval"
	// AnnotationNoExecuteWindow is a maintenance window for the pool's
	// NoExecute batches: "schedule=<cron>; duration=<d>[; timeZone=<tz>]".
	// Outside it no new batch starts (window.go).
	AnnotationNoExecuteWindow = KeyPrefix + "noexecute-window"

	// AnnotationOwnedLabels records the label keys this controller applied.
	// On a Node: keys in metadata.labels. On a Machine: keys in
	// spec.metadata.labels (the labels nodelink copies onto the Node).
	AnnotationOwnedLabels = KeyPrefix + "owned-labels"

	// AnnotationOwnedTaints records the taints this controller applied, as
	// key:Effect, on a Node (spec.taints) and on a Machine (spec.taints).
	AnnotationOwnedTaints = KeyPrefix + "owned-taints"

	// AnnotationOwnedMachineLabels records the label keys this controller
	// applied in a Machine's own metadata.labels.
	AnnotationOwnedMachineLabels = KeyPrefix + "owned-machine-labels"

	// LabelMachinePool is the label Hive puts on the spoke MachineSets of a
	// MachinePool; its value is the pool's spec.name.
	LabelMachinePool = "hive.openshift.io/machine-pool"

	// LabelMachineSet is the label machine-api puts on a Machine; its value
	// is the name of the MachineSet that created it.
	LabelMachineSet = "machine.openshift.io/cluster-api-machineset"

	// LabelClusterDeploymentName, on a MachinePoolSync, names the
	// ClusterDeployment of its pool (the label Hive uses for the same).
	LabelClusterDeploymentName = "hive.openshift.io/cluster-deployment-name"

	// Labels machine-api generates on every Machine (and so in the
	// MachineSet template Hive builds).
	LabelClusterAPICluster = "machine.openshift.io/cluster-api-cluster"
	LabelMachineRole       = "machine.openshift.io/cluster-api-machine-role"
	LabelMachineType       = "machine.openshift.io/cluster-api-machine-type"

	// LabelOSStream is the OS stream label the installer generates in the
	// MachineSet template when its OSStreams feature gate is on.
	LabelOSStream = "machineconfiguration.openshift.io/osstream"

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
