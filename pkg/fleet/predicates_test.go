package fleet

import (
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Hive updates a ClusterDeployment often (probe times, status fields we do
// not read); only what the controller reads passes.
func TestClusterDeploymentChanged(t *testing.T) {
	base := func() *hivev1.ClusterDeployment {
		return &hivev1.ClusterDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", Generation: 1, Annotations: map[string]string{"a": "1"}},
			Status: hivev1.ClusterDeploymentStatus{Conditions: []hivev1.ClusterDeploymentCondition{
				{Type: hivev1.UnreachableCondition, Status: corev1.ConditionFalse}}},
		}
	}
	now := metav1.Now()
	tests := map[string]struct {
		change func(cd *hivev1.ClusterDeployment)
		want   bool
	}{
		"nothing":              {func(*hivev1.ClusterDeployment) {}, false},
		"a probe time":         {func(cd *hivev1.ClusterDeployment) { cd.Status.Conditions[0].LastProbeTime = now }, false},
		"the spec":             {func(cd *hivev1.ClusterDeployment) { cd.Generation = 2 }, true},
		"an annotation":        {func(cd *hivev1.ClusterDeployment) { cd.Annotations["a"] = "2" }, true},
		"an annotation added":  {func(cd *hivev1.ClusterDeployment) { cd.Annotations["b"] = "1" }, true},
		"deletion":             {func(cd *hivev1.ClusterDeployment) { cd.DeletionTimestamp = &now }, true},
		"power state":          {func(cd *hivev1.ClusterDeployment) { cd.Status.PowerState = "Hibernating" }, true},
		"a condition's status": {func(cd *hivev1.ClusterDeployment) { cd.Status.Conditions[0].Status = corev1.ConditionTrue }, true},
		"a condition more": {func(cd *hivev1.ClusterDeployment) {
			cd.Status.Conditions = append(cd.Status.Conditions, cd.Status.Conditions[0])
		}, true},
		"another condition type": {func(cd *hivev1.ClusterDeployment) { cd.Status.Conditions[0].Type = hivev1.ClusterReadyCondition }, true},
	}
	p := clusterDeploymentChanged()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			old, cur := base(), base()
			tc.change(cur)
			if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.want {
				t.Errorf("Update passes = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPoolChanged(t *testing.T) {
	old := &hivev1.MachinePool{ObjectMeta: metav1.ObjectMeta{Generation: 1, Annotations: map[string]string{"a": "1"}}}
	p := poolChanged()
	for name, tc := range map[string]struct {
		change func(mp *hivev1.MachinePool)
		want   bool
	}{
		"status only":   {func(mp *hivev1.MachinePool) { mp.Status.Replicas = 3 }, false},
		"the spec":      {func(mp *hivev1.MachinePool) { mp.Generation = 2 }, true},
		"an annotation": {func(mp *hivev1.MachinePool) { mp.Annotations = map[string]string{"a": "2"} }, true},
		"deletion":      {func(mp *hivev1.MachinePool) { mp.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, true},
	} {
		cur := old.DeepCopy()
		tc.change(cur)
		if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.want {
			t.Errorf("%s: Update passes = %v, want %v", name, got, tc.want)
		}
	}
}

// The hub cache keeps only what the controller reads.
func TestTrims(t *testing.T) {
	now := metav1.Now()
	cd := &hivev1.ClusterDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "hive"}}},
		Spec:       hivev1.ClusterDeploymentSpec{ClusterName: "c", Installed: true, BaseDomain: "example.com"},
		Status: hivev1.ClusterDeploymentStatus{APIURL: "https://api", Conditions: []hivev1.ClusterDeploymentCondition{
			{Type: hivev1.UnreachableCondition, Status: corev1.ConditionFalse, LastProbeTime: now},
			{Type: hivev1.ProvisionFailedCondition, Status: corev1.ConditionFalse},
		}},
	}
	got, _ := TrimClusterDeployment(cd)
	out := got.(*hivev1.ClusterDeployment)
	if out.ManagedFields != nil || out.Spec.BaseDomain != "" || out.Status.APIURL != "" || len(out.Status.Conditions) != 1 ||
		!out.Status.Conditions[0].LastProbeTime.IsZero() || out.Spec.ClusterName != "c" || !out.Spec.Installed {
		t.Errorf("trimmed ClusterDeployment: %+v", out)
	}
	mp := &hivev1.MachinePool{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "hive"}}},
		Status: hivev1.MachinePoolStatus{Replicas: 3}}
	if got, _ := trimMachinePool(mp); got.(*hivev1.MachinePool).ManagedFields != nil || got.(*hivev1.MachinePool).Status.Replicas != 0 {
		t.Errorf("trimmed MachinePool: %+v", got)
	}
	secret := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kc", ResourceVersion: "7",
		Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "2"}}}
	if got, _ := trimSecretMetadata(secret); got.(*metav1.PartialObjectMetadata).Labels != nil || got.(*metav1.PartialObjectMetadata).ResourceVersion != "7" {
		t.Errorf("trimmed Secret metadata: %+v", got)
	}
	if got, _ := TrimClusterDeployment("not one"); got != "not one" {
		t.Errorf("other objects are not passed through")
	}
	if got := clusterSecret(&hivev1.ClusterDeployment{}); got != nil {
		t.Errorf("a ClusterDeployment without metadata is indexed under %v", got)
	}
}
