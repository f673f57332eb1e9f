package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API's group and version.
var GroupVersion = schema.GroupVersion{Group: "hubnodemetadata.openshift.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &MachinePoolSync{}, &MachinePoolSyncList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Phases of a pool's sync.
const (
	PhaseInSync      = "InSync"      // every targeted Machine and Node holds the pool's metadata
	PhaseDrifted     = "Drifted"     // some objects differ (dry-run, or writes failed)
	PhaseRefused     = "Refused"     // the pool has invalid or reserved items; nothing written
	PhasePaused      = "Paused"      // the pool or its cluster is paused by annotation
	PhaseUnreachable = "Unreachable" // the spoke is not connected or not eligible
	PhaseRollingOut  = "RollingOut"  // a NoExecute taint is reaching the pool's Nodes a batch at a time
	PhaseContested   = "Contested"   // objects are left alone for a while: another writer kept undoing the pool on them
)

// Reasons of a pool's phase that the controller decides. A Refused pool
// carries pkg/sync's validation code (ReservedKey, InvalidEffect...), an
// Unreachable one pkg/remote's connection reason (Unauthorized, Timeout...).
const (
	ReasonClusterPaused            = "ClusterPaused"            // Paused: the ClusterDeployment is annotated paused
	ReasonPoolPaused               = "PoolPaused"               // Paused: the MachinePool is annotated paused
	ReasonPoolDeleting             = "PoolDeleting"             // Paused: the MachinePool is being deleted
	ReasonDryRun                   = "DryRun"                   // Drifted: the controller runs with --dry-run
	ReasonReadFailed               = "ReadFailed"               // Unreachable: the spoke's cache could not be read
	ReasonWriteFailed              = "WriteFailed"              // Drifted: a write failed transiently; retried (one probe at a time while every write fails)
	ReasonWriteDenied              = "WriteDenied"              // Drifted: the spoke refused a write; retried every --denied-retry
	ReasonContested                = "Contested"                // Contested: objects held after another writer kept undoing the pool
	ReasonNoExecutePaced           = "NoExecutePaced"           // RollingOut: NoExecute taints wait for their batch
	ReasonNodesNotReady            = "NodesNotReady"            // RollingOut: no new batch while tainted Nodes, or more than a batch of the pool's, are NotReady
	ReasonOutsideWindow            = "OutsideWindow"            // RollingOut: no new batch until the pool's maintenance window opens
	ReasonClusterDeploymentMissing = "ClusterDeploymentMissing" // Unreachable: the pool names a ClusterDeployment that does not exist
)

// Condition types of a MachinePoolSync, for `kubectl wait` and the tools that
// read the Kubernetes API conventions' conditions. Their observedGeneration is
// the MachinePool's generation they judge, as status.observedGeneration is.
const (
	// ConditionReady is True when the pool's observed generation holds on
	// every targeted Machine and Node (phase InSync).
	ConditionReady = "Ready"
	// ConditionProgressing is True while a change is under way: a paced
	// NoExecute rollout, or writes being retried.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when someone must look: the pool is refused,
	// the spoke denies writes or cannot be reached, or another writer keeps
	// undoing the pool (phase Refused, Unreachable, Contested, or Drifted
	// with reason WriteDenied).
	ConditionDegraded = "Degraded"
)

// Reasons of the conditions that the phase's own reason does not give.
const (
	ReasonInSync       = "InSync"       // Ready=True
	ReasonAsExpected   = "AsExpected"   // Degraded=False
	ReasonIdle         = "Idle"         // Progressing=False: nothing under way
	ReasonWriteRetried = "WriteRetried" // Progressing=True: failed writes are retried
)

// MachinePoolSyncStatus summarises the last sync of one MachinePool.
type MachinePoolSyncStatus struct {
	// Cluster is the ClusterDeployment's name.
	Cluster string `json:"cluster,omitempty"`
	// Pool is the MachinePool's spec.name (its name on the spoke).
	Pool string `json:"pool,omitempty"`
	// Phase is one of InSync, Drifted, RollingOut, Contested, Refused, Paused, Unreachable.
	Phase string `json:"phase,omitempty"`
	// ObservedGeneration is the MachinePool generation this status is for.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Total counts the targeted objects (Machines plus linked Nodes).
	Total int `json:"total"`
	// Synced counts the targeted objects that hold the pool's metadata.
	Synced int `json:"synced"`
	// Drifted counts the targeted objects that do not.
	Drifted int `json:"drifted"`
	// Patched counts the objects written in the last sync, or, when that sync's
	// status write failed, in the sync whose change the status says (kept in
	// the controller's memory: 0 if it restarted before saying it).
	Patched int `json:"patched"`
	// Skipped counts Machines whose Node could not be targeted (no nodeRef yet, Node missing or not theirs).
	Skipped int `json:"skipped"`
	// Overrides counts declared items that held a foreign value and were set to the pool's value.
	Overrides int `json:"overrides,omitempty"`
	// Reason is a stable code for the phase or the last error.
	Reason string `json:"reason,omitempty"`
	// Message is the last error or refusal, for people.
	Message string `json:"message,omitempty"`
	// LastSyncTime is when a completed sync last changed this status. A sync
	// that finds the pool as the status describes it writes nothing, so this
	// is no heartbeat: how fresh the controller's view is lives in the metric
	// hub_node_metadata_cluster_last_sync_timestamp_seconds and the
	// HubNodeMetadataSyncStale alert.
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// LastChangeTime is when the controller last wrote to the pool's spoke objects.
	LastChangeTime *metav1.Time `json:"lastChangeTime,omitempty"`
	// Rollout is set while the pool's new or changed NoExecute taints reach
	// its existing Nodes a batch at a time (Phase RollingOut).
	Rollout *RolloutStatus `json:"rollout,omitempty"`
	// Declared is what the pool declared when this controller last planned
	// its objects, one item each: label/<key>=<value>,
	// machineLabel/<key>=<value>, taint/<key>:<effect>=<value>. Kept to tell
	// which items a later spec dropped (Dropped).
	// +optional
	Declared []string `json:"declared,omitempty"`
	// Dropped lists items the pool declared and no longer does, each with the
	// time this controller first saw the spec without it, for 7 days. A
	// Machine created from the MachineSet template before that time may hold
	// one the controller never recorded; it goes when the Machine's creator
	// alone wrote it and the template no longer holds it. Items declared
	// again leave the list.
	// +listType=map
	// +listMapKey=item
	// +optional
	Dropped []DroppedItem `json:"dropped,omitempty"`
	// Conditions are Ready, Progressing and Degraded, derived from the phase
	// and reason. Each condition's observedGeneration is the MachinePool
	// generation it judges, and its lastTransitionTime moves only when its
	// status does. A Ready=True whose observedGeneration is below the pool's
	// metadata.generation answers for an older spec: wait for the generation
	// first (README, "Conditions, and waiting for a pool change").
	//
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DroppedItem is an item a pool stopped declaring (Status.Dropped).
type DroppedItem struct {
	// Item is the item as Status.Declared names it.
	Item string `json:"item"`
	// Time is when this controller first saw the pool's spec without it.
	Time metav1.Time `json:"time"`
}

// RolloutStatus is where a paced NoExecute rollout stands. Everything else
// of the pool is applied at once; only these taints wait.
type RolloutStatus struct {
	// Taints are the paced taints, as key=value:NoExecute.
	Taints string `json:"taints"`
	// Progress is Done/Total, for kubectl get.
	Progress string `json:"progress"`
	// Done counts the pool's Nodes (with their Machines) that hold the
	// taints or are being written; Total the pool's Nodes.
	Done  int `json:"done"`
	Total int `json:"total"`
	// Batch is how many Nodes get the taints at a time; Interval the wait
	// between batches.
	Batch    int    `json:"batch"`
	Interval string `json:"interval"`
	// NextBatchTime is when the next batch is due; unset in a dry run.
	NextBatchTime *metav1.Time `json:"nextBatchTime,omitempty"`
}

// MachinePoolSync is the controller's report on one MachinePool.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mpsync,categories=hive
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.cluster`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.status.pool`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Synced",type=integer,JSONPath=`.status.synced`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.total`
// +kubebuilder:printcolumn:name="Drifted",type=integer,JSONPath=`.status.drifted`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.rollout.progress`
// +kubebuilder:printcolumn:name="Next Batch",type=string,JSONPath=`.status.rollout.nextBatchTime`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Since",type=date,JSONPath=`.status.lastSyncTime`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
type MachinePoolSync struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status MachinePoolSyncStatus `json:"status,omitempty"`
}

// MachinePoolSyncList is a list of MachinePoolSync.
//
// +kubebuilder:object:root=true
type MachinePoolSyncList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MachinePoolSync `json:"items"`
}

var _ runtime.Object = &MachinePoolSync{}
