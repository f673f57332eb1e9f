package spokecache

import (
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	GVKNode       = corev1.SchemeGroupVersion.WithKind("Node")
	GVKMachine    = machinev1beta1.GroupVersion.WithKind("Machine")
	GVKMachineSet = machinev1beta1.GroupVersion.WithKind("MachineSet")
)

// NewScheme returns a scheme with the types a Spoke serves (core/v1 and machine/v1beta1).
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := machinev1beta1.Install(s); err != nil {
		panic(err)
	}
	return s
}

// kindSpec is where a kind is read: its resource, its namespace ("" for every one) and the
// label selector of its lists and watches; and the Accept header of its watches. The cache
// holds only what sync.Targets can map to a pool (each kind's spec says which).
type kindSpec struct {
	gvk       schema.GroupVersionKind
	resource  string
	namespace string
	selector  string
	// accept is the Accept header of the kind's watches.
	accept string
}
