package spokecache

import (
	"context"
	"fmt"
	"io"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// KindClient is one kind's REST client on a spoke. The kind's list-and-watch loop reads
// through it, and the Spoke's live reads and patches go through it; the store holds records
// only.
type KindClient struct {
	spec   kindSpec
	rc     rest.Interface
	header watchHeader // the user agent and bearer token of its requests (request)
}

// request aims r at the kind's resource, in namespace when the kind is namespaced (every
// namespace when it is empty), with the user agent and bearer token already set: client-go's
// user-agent and bearer-token wrappers then pass it on as it is, where each would clone it
// (request and header) to add its own, for as long as it is in flight (see watchHeader). A
// kubeconfig with impersonation or a username and password still has a wrapper that clones.
func (kc *KindClient) request(r *rest.Request, namespace string) *rest.Request {
	r = r.NamespaceIfScoped(namespace, kc.spec.namespace != "").Resource(kc.spec.resource)
	kc.header.each(func(k, v string) { r = r.SetHeader(k, v) })
	return r
}

// listRequest is a GET of the kind's resource with o (its label selector set to the kind's),
// for a list or a watch.
func (kc *KindClient) listRequest(o *metav1.ListOptions) *rest.Request {
	o.LabelSelector = kc.spec.selector
	return kc.request(kc.rc.Get(), kc.spec.namespace).VersionedParams(o, metav1.ParameterCodec)
}

// list lists the kind with o, asking for accept ("": the client's own), and returns the
// answer's body and content type.
func (kc *KindClient) list(ctx context.Context, o metav1.ListOptions, accept string) (body []byte, contentType string, err error) {
	r := kc.listRequest(&o)
	if accept != "" {
		r = r.SetHeader("Accept", accept)
	}
	res := r.Do(ctx).ContentType(&contentType)
	if err := res.Error(); err != nil {
		return nil, "", err // with the server's Status, which Raw's error lacks
	}
	body, _ = res.Raw()
	return body, contentType, nil
}

// kindFor returns, of kinds, the one obj (an object or a list) is of; an error when the spoke
// is not read for it.
func kindFor[K any](kinds []K, spec func(K) kindSpec, obj runtime.Object) (K, error) {
	var gvk schema.GroupVersionKind
	switch obj.(type) {
	case *corev1.Node, *corev1.NodeList:
		gvk = GVKNode
	case *machinev1beta1.Machine, *machinev1beta1.MachineList:
		gvk = GVKMachine
	case *machinev1beta1.MachineSet, *machinev1beta1.MachineSetList:
		gvk = GVKMachineSet
	}
	for _, k := range kinds {
		if spec(k).gvk == gvk {
			return k, nil
		}
	}
	var none K
	return none, fmt.Errorf("%T is not read on a spoke: only Nodes, and Machines and MachineSets in %s, are", obj, nmsync.MachineAPINamespace)
}

// ClientFor returns, of clients, the one for obj's kind.
func ClientFor(clients []*KindClient, obj runtime.Object) (*KindClient, error) {
	return kindFor(clients, func(kc *KindClient) kindSpec { return kc.spec }, obj)
}

// Kind is the kind the client reads and writes.
func (kc *KindClient) Kind() schema.GroupVersionKind { return kc.spec.gvk }

// Get reads one object live, with the caller's deadline.
func (kc *KindClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return kc.request(kc.rc.Get(), key.Namespace).Name(key.Name).
		VersionedParams((&client.GetOptions{}).ApplyOptions(opts).AsGetOptions(), metav1.ParameterCodec).
		Do(ctx).Into(obj)
}

// List lists the kind live, with the caller's deadline.
func (kc *KindClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	return kc.request(kc.rc.Get(), lo.Namespace).
		VersionedParams(lo.AsListOptions(), metav1.ParameterCodec).
		Do(ctx).Into(list)
}

// Patch sends the patch and checks the answer, but does not decode the patched object into
// obj, which is left as it was: callers read the new state from the cache, whose watch brings
// it anyway. Decoding every answer would cost a whole object's allocations per write (a Node
// with its status and images) for nothing; and only its metadata is asked for (patchAccept).
// A successful answer's body is read to its end and dropped, never held whole: adopting 10
// spokes of 100 Nodes puts 80 patches in flight, and what each holds meanwhile is part of
// the heap the burst grows to, which the spans its survivors land in keep in use after.
func (kc *KindClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	body, err := kc.request(kc.rc.Patch(patch.Type()), obj.GetNamespace()).Name(obj.GetName()).
		VersionedParams((&client.PatchOptions{}).ApplyOptions(opts).AsPatchOptions(), metav1.ParameterCodec).
		SetHeader("Accept", patchAccept).Body(data).Stream(ctx)
	if err != nil {
		return err // a failed answer's Status, as Do gives it
	}
	defer body.Close()
	_, err = io.Copy(io.Discard, body)
	return err
}

// patchAccept asks for the patched object's metadata only, not the whole object: the answer is
// checked, never decoded, and a Node's status or a Machine's providerSpec would only cost the
// spoke's API server, the wire and the hub's TLS for nothing. In JSON, so that a failure's
// Status decodes with any kind's codec.
const patchAccept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
