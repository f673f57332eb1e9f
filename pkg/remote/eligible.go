package remote

import (
	"fmt"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
)

// Hive annotations that make the hub keep its hands off a cluster.
const (
	annotationReconcilePause = "hive.openshift.io/reconcile-pause"
	annotationSyncSetPause   = "hive.openshift.io/syncset-pause"
	annotationRelocate       = "hive.openshift.io/relocate"
	annotationFakeCluster    = "hive.openshift.io/fake-cluster"
)

// Eligible reports whether the hub should talk to the cluster at all, judging from the
// ClusterDeployment alone (no network, no clock). When ok is false, reason says why and message
// says it for humans. The checks run in a fixed order, so a CD that is, say, both deleting and
// hibernating always reports Deleting:
//
//	Deleting, FakeCluster, Relocating, Paused, NotInstalled, NoClusterMetadata, Hibernating, Unreachable
func Eligible(cd *hivev1.ClusterDeployment) (ok bool, reason Reason, message string) {
	if cd == nil {
		return false, ReasonNoClusterMetadata, "no ClusterDeployment"
	}
	if cd.DeletionTimestamp != nil {
		return false, ReasonDeleting, "the ClusterDeployment is being deleted"
	}
	ann := cd.Annotations
	if ann[annotationFakeCluster] == "true" {
		return false, ReasonFakeCluster, fmt.Sprintf("annotation %s=true: no real cluster behind it", annotationFakeCluster)
	}
	if _, found := ann[annotationRelocate]; found {
		return false, ReasonRelocating, fmt.Sprintf("annotation %s is set: the cluster is moving to another hub", annotationRelocate)
	}
	for _, a := range []string{annotationReconcilePause, annotationSyncSetPause} {
		if ann[a] == "true" {
			return false, ReasonPaused, fmt.Sprintf("annotation %s=true", a)
		}
	}
	if !cd.Spec.Installed {
		return false, ReasonNotInstalled, "the cluster is not installed yet"
	}
	if cd.Spec.ClusterMetadata == nil || cd.Spec.ClusterMetadata.AdminKubeconfigSecretRef.Name == "" {
		return false, ReasonNoClusterMetadata, "spec.clusterMetadata.adminKubeconfigSecretRef is not set"
	}
	if cd.Spec.PowerState == hivev1.ClusterPowerStateHibernating {
		return false, ReasonHibernating, "spec.powerState is Hibernating"
	}
	if ps := cd.Status.PowerState; ps != "" && ps != hivev1.ClusterPowerStateRunning {
		return false, ReasonHibernating, fmt.Sprintf("status.powerState is %s", ps)
	}
	if c := findCondition(cd, hivev1.ClusterHibernatingCondition); c != nil && c.Status == corev1.ConditionTrue {
		return false, ReasonHibernating, "condition Hibernating is True"
	}
	switch c := findCondition(cd, hivev1.UnreachableCondition); {
	case c == nil:
		return false, ReasonUnreachable, "Hive has not reported the Unreachable condition yet"
	case c.Status != corev1.ConditionFalse:
		return false, ReasonUnreachable, fmt.Sprintf("Hive reports condition Unreachable=%s", c.Status)
	}
	return true, "", ""
}

func findCondition(cd *hivev1.ClusterDeployment, t hivev1.ClusterDeploymentConditionType) *hivev1.ClusterDeploymentCondition {
	for i := range cd.Status.Conditions {
		if cd.Status.Conditions[i].Type == t {
			return &cd.Status.Conditions[i]
		}
	}
	return nil
}
