package remote

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Spoke is the consumer-facing handle on one connected spoke cluster.
//
// Every call is bounded by Options.RequestTimeout (a shorter deadline in ctx wins). Once the
// connection is torn down (health failure, rotation, Forget, ineligibility) every call fails at
// once with an error wrapping ErrNotConnected; get a fresh Spoke from Manager.GetSpoke.
type Spoke interface {
	// Reader reads from the spoke's trimmed cache: the pools' MachineSets and Machines in
	// openshift-machine-api, and Nodes. Other types fail (the cache holds nothing else).
	// Cached objects are trimmed (see doc.go): patch from them, never Update.
	client.Reader
	// Live reads straight from the spoke API server (e.g. to re-read after a conflict).
	Live() client.Reader
	// Patch writes a Machine (in openshift-machine-api) or a Node. Anything else fails with
	// ErrRequestNotAllowed before leaving the hub.
	Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error
	// Server is the API server URL in use. It never carries credentials.
	Server() string
}

var (
	gvkNode       = corev1.SchemeGroupVersion.WithKind("Node")
	gvkMachine    = machinev1beta1.GroupVersion.WithKind("Machine")
	gvkMachineSet = machinev1beta1.GroupVersion.WithKind("MachineSet")
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

type spoke struct {
	cluster string
	server  string
	// cache serves the cached reads; clients (one a kind) the live reads and the patches.
	cache   *spokeCache
	clients []*kindClient
	timeout time.Duration
	// closed is set when the connection is torn down; it holds the error to return.
	closed atomic.Pointer[notConnectedError]
}

var _ Spoke = (*spoke)(nil)

func (s *spoke) close(reason Reason, message string) {
	s.closed.CompareAndSwap(nil, &notConnectedError{cluster: s.cluster, reason: reason, message: message})
}

func (s *spoke) check() error {
	if e := s.closed.Load(); e != nil {
		return e
	}
	return nil
}

// bound returns ctx limited to the request timeout unless it already has a shorter deadline.
func (s *spoke) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// Get and List read the cache, in memory: no request, so no request timeout (a reconcile reads
// a pool's Nodes one Get each, and a timer apiece would be spent for nothing).
func (s *spoke) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.cache.Get(ctx, key, obj, opts...)
}

func (s *spoke) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.cache.List(ctx, list, opts...)
}

func (s *spoke) Live() client.Reader { return liveReader{s} }

// Patch sends the patch and checks the answer, but does not decode the patched object into
// obj, which is left as it was: callers read the new state from the cache, whose watch brings
// it anyway. Decoding every answer would cost a whole object's allocations per write (a Node
// with its status and images) for nothing; and only its metadata is asked for (patchAccept).
// A successful answer's body is read to its end and dropped, never held whole: adopting 10
// spokes of 100 Nodes puts 80 patches in flight, and what each holds meanwhile is part of
// the heap the burst grows to, which the spans its survivors land in keep in use after.
func (s *spoke) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := s.check(); err != nil {
		return err
	}
	kc, err := clientFor(s.clients, obj)
	if err != nil || (kc.spec.gvk != gvkNode && kc.spec.gvk != gvkMachine) {
		return fmt.Errorf("%w: patch %T %s", ErrRequestNotAllowed, obj, client.ObjectKeyFromObject(obj))
	}
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
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

func (s *spoke) Server() string { return s.server }

// liveReader reads straight from the spoke API server, through the kind clients.
type liveReader struct{ s *spoke }

func (l liveReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := l.s.check(); err != nil {
		return err
	}
	kc, err := clientFor(l.s.clients, obj)
	if err != nil {
		return err
	}
	ctx, cancel := l.s.bound(ctx)
	defer cancel()
	return kc.request(kc.rc.Get(), key.Namespace).Name(key.Name).
		VersionedParams((&client.GetOptions{}).ApplyOptions(opts).AsGetOptions(), metav1.ParameterCodec).
		Do(ctx).Into(obj)
}

func (l liveReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := l.s.check(); err != nil {
		return err
	}
	kc, err := clientFor(l.s.clients, list)
	if err != nil {
		return err
	}
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	ctx, cancel := l.s.bound(ctx)
	defer cancel()
	return kc.request(kc.rc.Get(), lo.Namespace).
		VersionedParams(lo.AsListOptions(), metav1.ParameterCodec).
		Do(ctx).Into(list)
}
