// Package v1alpha1 holds the one API this controller adds to the hub:
// MachinePoolSync, a per-MachinePool summary of what the controller found and
// did on the pool's spoke, readable with `kubectl get machinepoolsyncs -A`.
//
// It lives beside the MachinePool (same namespace, same name, owned by it so
// it goes when the pool goes) and never inside Hive's own status, which Hive
// rewrites after each of its syncs. Writing it never triggers Hive: Hive
// does not watch it.
//
// +kubebuilder:object:generate=true
// +groupName=hubnodemetadata.openshift.io
package v1alpha1
