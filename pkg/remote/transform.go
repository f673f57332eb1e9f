package remote

import (
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"strings"
)

// trimObject is the spoke cache's DefaultTransform. It keeps only what label and taint
// reconciliation needs, so a spoke with thousands of Nodes costs little hub memory:
//
//   - every object: managedFields dropped;
//   - Node: only name, uid, resourceVersion, labels, annotations, deletionTimestamp,
//     spec.taints and spec.providerID (status, images, conditions... are dropped);
//   - Machine: spec.providerSpec.value dropped; status keeps only nodeRef and phase;
//   - MachineSet: spec.template.spec.providerSpec.value dropped.
//
// Consequence for callers: cached objects are not complete. Never Update from them; compute
// patches (merge patches from a cached base diff only the fields that exist in both) or read
// Live. It is idempotent and passes unknown values (e.g. tombstones) through unchanged.
func trimObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Node:
		return &corev1.Node{
			TypeMeta: o.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{
				Name:              o.Name,
				UID:               o.UID,
				ResourceVersion:   o.ResourceVersion,
				Labels:            o.Labels,
				Annotations:       keptAnnotations(o.Annotations),
				DeletionTimestamp: o.DeletionTimestamp,
			},
			Spec: corev1.NodeSpec{
				Taints:     o.Spec.Taints,
				ProviderID: o.Spec.ProviderID,
			},
		}, nil
	case *machinev1beta1.Machine:
		return &machinev1beta1.Machine{
			TypeMeta: o.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{
				Namespace:         o.Namespace,
				Name:              o.Name,
				UID:               o.UID,
				ResourceVersion:   o.ResourceVersion,
				Labels:            o.Labels,
				Annotations:       keptAnnotations(o.Annotations),
				OwnerReferences:   o.OwnerReferences,
				DeletionTimestamp: o.DeletionTimestamp,
			},
			Spec: machinev1beta1.MachineSpec{
				ObjectMeta: machinev1beta1.ObjectMeta{Labels: o.Spec.ObjectMeta.Labels},
				Taints:     o.Spec.Taints,
				ProviderID: o.Spec.ProviderID,
			},
			Status: machinev1beta1.MachineStatus{NodeRef: o.Status.NodeRef, Phase: o.Status.Phase},
		}, nil
	case *machinev1beta1.MachineSet:
		// Only what maps a pool to its Machines: labels, name and UID.
		return &machinev1beta1.MachineSet{
			TypeMeta: o.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{
				Namespace:         o.Namespace,
				Name:              o.Name,
				UID:               o.UID,
				ResourceVersion:   o.ResourceVersion,
				Labels:            o.Labels,
				DeletionTimestamp: o.DeletionTimestamp,
			},
		}, nil
	case metav1.Object:
		o.SetManagedFields(nil)
		return o, nil
	}
	return obj, nil
}

// keptAnnotations keeps only the annotations the planner reads: this
// controller's bookkeeping (hub-node-metadata.openshift.io/*) and
// nodelink's machine.openshift.io/machine. Real Nodes carry kilobytes of
// others' annotations (OVN, MCO, CSI) that would cost hub memory per spoke.
func keptAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, "hub-node-metadata.openshift.io/") || k == "machine.openshift.io/machine" {
			if out == nil {
				out = make(map[string]string, 4)
			}
			out[k] = v
		}
	}
	return out
}
