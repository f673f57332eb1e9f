package spokecache

import (
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
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

// The cache holds only what sync.Targets can map to a pool: MachineSets that Hive labels with
// their pool, and Machines that a MachineSet labels as its own (control-plane Machines and
// MachineSets nobody manages through a pool are never read). Every Node is held: whether a
// Node belongs to a pool is known only from its Machine.
const (
	machineSetSelector = nmsync.LabelMachinePool
	machineSelector    = nmsync.LabelMachineSet
)

type kindSpec struct {
	gvk       schema.GroupVersionKind
	resource  string
	namespace string
	selector  string
	// accept is the Accept header of the kind's watches.
	accept string
	// metadataOnly lists and watches the kind's metadata only (PartialObjectMetadata, in
	// protobuf): enough when the planner reads nothing else of it.
	metadataOnly bool
}

// partialObjectMetadataAccept asks for PartialObjectMetadata, as client-go's metadata client does.
const partialObjectMetadataAccept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1," +
	"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
