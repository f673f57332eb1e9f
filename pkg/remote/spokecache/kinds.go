package spokecache

import (
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
