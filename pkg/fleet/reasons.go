package fleet

import (
	"github.com/openshift/hub-node-metadata/api/v1alpha1"
)

// Event reasons on MachinePools and ClusterDeployments.
const (
	EventApplied    = "Applied"
	EventOverrode   = "AppliedOverride"
	EventWouldApply = "DriftDetected"
	EventRefused    = "Refused"
	EventSyncFailed = "SyncFailed"
	EventContested  = v1alpha1.ReasonContested
	// EventDenied: the spoke refused a patch in a way retrying cannot fix
	// (an admission webhook's denial, a 422); the object is retried every
	// --denied-retry.
	EventDenied = v1alpha1.ReasonWriteDenied
	// EventPoolWarning: items of the pool were corrected or ignored, as Hive
	// does (duplicate taints, machine labels that clash with machine-api's).
	EventPoolWarning  = "PoolItemsIgnored"
	EventDisconnected = "SpokeUnavailable"
	EventConnected    = "SpokeConnected"
	// EventClusterMissing: the pool names a ClusterDeployment that does not exist.
	EventClusterMissing = v1alpha1.ReasonClusterDeploymentMissing
	// A paced NoExecute rollout: its first batch, each batch, its end.
	EventNoExecuteStarted = "NoExecuteRolloutStarted"
	EventNoExecuteBatch   = "NoExecuteBatch"
	EventNoExecuteDone    = "NoExecuteRolloutDone"
	// EventNoExecuteHeld: the health gate or the maintenance window holds
	// the next batch (said when the hold begins or changes).
	EventNoExecuteHeld = "NoExecuteHeld"
	eventAction        = "Sync"
)
