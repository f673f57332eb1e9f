package spokecache

import (
	"context"
	"fmt"
	"io"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// machineSetSpec: the MachineSets Hive labels with their pool (MachineSets no pool manages are
// never read), as metadata only, in protobuf: the planner reads their name, uid and labels, and
// a full MachineSet is mostly its template's providerSpec, which costs JSON decoding on every
// list and event and a buffer the size of the largest one per watch.
var machineSetSpec = kindSpec{gvk: GVKMachineSet, resource: "machinesets", namespace: nmsync.MachineAPINamespace,
	selector: nmsync.LabelMachinePool, accept: partialObjectMetadataAccept}

// partialObjectMetadataAccept asks for PartialObjectMetadata, as client-go's metadata client does.
const partialObjectMetadataAccept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1," +
	"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// machineSetCodec lists MachineSets through client-go's metadata client and reads their
// watches with the metadata scheme's decoders.
type machineSetCodec struct {
	r   metadata.ResourceInterface
	neg runtime.ClientNegotiator
}

func newMachineSetCodec(d codecDeps) codec {
	return machineSetCodec{
		r:   d.mc.Resource(GVKMachineSet.GroupVersion().WithResource(machineSetSpec.resource)).Namespace(machineSetSpec.namespace),
		neg: runtime.NewClientNegotiator(metainternalversionscheme.Codecs.WithoutConversion(), metav1.SchemeGroupVersion),
	}
}

func (c machineSetCodec) list(ctx context.Context, o metav1.ListOptions) ([]*record, string, error) {
	o.LabelSelector = machineSetSpec.selector
	l, err := c.r.List(ctx, o)
	if err != nil {
		return nil, "", err
	}
	recs := make([]*record, len(l.Items))
	for i := range l.Items {
		recs[i] = compactMachineSet(&l.Items[i].ObjectMeta)
	}
	return recs, l.ResourceVersion, nil
}

func (c machineSetCodec) negotiator() runtime.ClientNegotiator { return c.neg }

func (c machineSetCodec) events(body io.ReadCloser, mediaType string, params map[string]string) (eventDecoder, error) {
	return streamEvents(c.neg, body, mediaType, params)
}

func (machineSetCodec) compact(obj runtime.Object) (*record, error) {
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		return compactMachineSet(&o.ObjectMeta), nil
	case *machinev1beta1.MachineSet: // kept as its metadata is (the cache watches only that)
		return compactMachineSet(&o.ObjectMeta), nil
	}
	return nil, fmt.Errorf("unexpected %T in a MachineSet watch", obj)
}

// compactMachineSet keeps of a MachineSet what compactMeta keeps but annotations: its name,
// uid, resourceVersion, labels and deletionTimestamp.
func compactMachineSet(m *metav1.ObjectMeta) *record { return compactMeta(m, false, "") }
