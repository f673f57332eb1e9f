package remote

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEligible(t *testing.T) {
	type want struct {
		OK     bool
		Reason Reason
	}
	annotate := func(k, v string) func(*hivev1.ClusterDeployment) {
		return func(cd *hivev1.ClusterDeployment) { cd.Annotations = map[string]string{k: v} }
	}
	setCondition := func(typ hivev1.ClusterDeploymentConditionType, status corev1.ConditionStatus) func(*hivev1.ClusterDeployment) {
		return func(cd *hivev1.ClusterDeployment) {
			for i := range cd.Status.Conditions {
				if cd.Status.Conditions[i].Type == typ {
					cd.Status.Conditions[i].Status = status
					return
				}
			}
			cd.Status.Conditions = append(cd.Status.Conditions, hivev1.ClusterDeploymentCondition{Type: typ, Status: status})
		}
	}
	tests := map[string]struct {
		cd   *hivev1.ClusterDeployment
		want want
	}{
		"eligible":                       {eligibleCD(), want{OK: true}},
		"eligible with empty powerState": {eligibleCD(func(cd *hivev1.ClusterDeployment) { cd.Status.PowerState = "" }), want{OK: true}},
		"nil":                            {nil, want{Reason: ReasonNoClusterMetadata}},
		"deleting": {eligibleCD(func(cd *hivev1.ClusterDeployment) {
			cd.DeletionTimestamp = &metav1.Time{}
			cd.Spec.PowerState = hivev1.ClusterPowerStateHibernating // Deleting wins
		}), want{Reason: ReasonDeleting}},
		"fake cluster":            {eligibleCD(annotate(annotationFakeCluster, "true")), want{Reason: ReasonFakeCluster}},
		"fake cluster false":      {eligibleCD(annotate(annotationFakeCluster, "false")), want{OK: true}},
		"relocating":              {eligibleCD(annotate(annotationRelocate, "")), want{Reason: ReasonRelocating}},
		"reconcile pause":         {eligibleCD(annotate(annotationReconcilePause, "true")), want{Reason: ReasonPaused}},
		"reconcile pause not set": {eligibleCD(annotate(annotationReconcilePause, "false")), want{OK: true}},
		"syncset pause":           {eligibleCD(annotate(annotationSyncSetPause, "true")), want{Reason: ReasonPaused}},
		"not installed": {eligibleCD(func(cd *hivev1.ClusterDeployment) { cd.Spec.Installed = false }),
			want{Reason: ReasonNotInstalled}},
		"no cluster metadata": {eligibleCD(func(cd *hivev1.ClusterDeployment) { cd.Spec.ClusterMetadata = nil }),
			want{Reason: ReasonNoClusterMetadata}},
		"no secret name": {eligibleCD(func(cd *hivev1.ClusterDeployment) { cd.Spec.ClusterMetadata.AdminKubeconfigSecretRef.Name = "" }),
			want{Reason: ReasonNoClusterMetadata}},
		"spec hibernating": {eligibleCD(func(cd *hivev1.ClusterDeployment) { cd.Spec.PowerState = hivev1.ClusterPowerStateHibernating }),
			want{Reason: ReasonHibernating}},
		"status resuming": {eligibleCD(func(cd *hivev1.ClusterDeployment) { cd.Status.PowerState = hivev1.ClusterPowerStateWaitingForNodes }),
			want{Reason: ReasonHibernating}},
		"hibernating condition":       {eligibleCD(setCondition(hivev1.ClusterHibernatingCondition, corev1.ConditionTrue)), want{Reason: ReasonHibernating}},
		"hibernating condition false": {eligibleCD(setCondition(hivev1.ClusterHibernatingCondition, corev1.ConditionFalse)), want{OK: true}},
		"unreachable true":            {eligibleCD(setCondition(hivev1.UnreachableCondition, corev1.ConditionTrue)), want{Reason: ReasonUnreachable}},
		"unreachable unknown":         {eligibleCD(setCondition(hivev1.UnreachableCondition, corev1.ConditionUnknown)), want{Reason: ReasonUnreachable}},
		"unreachable missing": {eligibleCD(func(cd *hivev1.ClusterDeployment) { cd.Status.Conditions = nil }),
			want{Reason: ReasonUnreachable}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ok, reason, msg := Eligible(tc.cd)
			if diff := cmp.Diff(tc.want, want{OK: ok, Reason: reason}); diff != "" {
				t.Errorf("Eligible (-want +got):\n%s", diff)
			}
			if ok != (msg == "") {
				t.Errorf("message %q with ok=%v", msg, ok)
			}
		})
	}
}
