package remote

import (
	"fmt"
	"net/http"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// kindClient is one kind's REST client on a spoke. The kind's list-and-watch loop reads
// through it, and the Spoke's live reads and patches go through it; the store holds records
// only.
type kindClient struct {
	spec   kindSpec
	rc     rest.Interface
	header watchHeader // the user agent and bearer token of its requests (request)
}

// newKindClients builds one REST client for each of spokeKinds, over hc. It does no I/O.
func newKindClients(cfg *rest.Config, hc *http.Client, codecs serializer.CodecFactory) ([]*kindClient, error) {
	header := newWatchHeader(cfg)
	out := make([]*kindClient, len(spokeKinds))
	for i, k := range spokeKinds {
		rc, err := apiutil.RESTClientForGVK(k.gvk, false, false, cfg, codecs, hc)
		if err != nil {
			return nil, err
		}
		out[i] = &kindClient{spec: k, rc: rc, header: header}
	}
	return out, nil
}

// request aims r at the kind's resource, in namespace when the kind is namespaced (every
// namespace when it is empty), with the user agent and bearer token already set: client-go's
// user-agent and bearer-token wrappers then pass it on as it is, where each would clone it
// (request and header) to add its own, for as long as it is in flight (see watchHeader). A
// kubeconfig with impersonation or a username and password still has a wrapper that clones.
func (kc *kindClient) request(r *rest.Request, namespace string) *rest.Request {
	r = r.NamespaceIfScoped(namespace, kc.spec.namespace != "").Resource(kc.spec.resource)
	kc.header.each(func(k, v string) { r = r.SetHeader(k, v) })
	return r
}

// kindFor returns, of kinds, the one obj (an object or a list) is of; an error when the spoke
// is not read for it.
func kindFor[K any](kinds []K, spec func(K) kindSpec, obj runtime.Object) (K, error) {
	var gvk schema.GroupVersionKind
	switch obj.(type) {
	case *corev1.Node, *corev1.NodeList:
		gvk = gvkNode
	case *machinev1beta1.Machine, *machinev1beta1.MachineList:
		gvk = gvkMachine
	case *machinev1beta1.MachineSet, *machinev1beta1.MachineSetList:
		gvk = gvkMachineSet
	}
	for _, k := range kinds {
		if spec(k).gvk == gvk {
			return k, nil
		}
	}
	var none K
	return none, fmt.Errorf("%T is not read on a spoke: only Nodes, and Machines and MachineSets in %s, are", obj, MachineAPINamespace)
}

// clientFor returns, of clients, the one for obj's kind.
func clientFor(clients []*kindClient, obj runtime.Object) (*kindClient, error) {
	return kindFor(clients, func(kc *kindClient) kindSpec { return kc.spec }, obj)
}
