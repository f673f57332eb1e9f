package remote

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
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

// NewRESTMapper is the static mapper for the only three kinds the hub uses on a spoke, so no
// discovery request is ever made.
func NewRESTMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{corev1.SchemeGroupVersion, machinev1beta1.GroupVersion})
	for _, k := range []struct {
		gvk              schema.GroupVersionKind
		plural, singular string
		scope            meta.RESTScope
	}{
		{gvkNode, "nodes", "node", meta.RESTScopeRoot},
		{gvkMachine, "machines", "machine", meta.RESTScopeNamespace},
		{gvkMachineSet, "machinesets", "machineset", meta.RESTScopeNamespace},
	} {
		m.AddSpecific(k.gvk, k.gvk.GroupVersion().WithResource(k.plural), k.gvk.GroupVersion().WithResource(k.singular), k.scope)
		// The List kinds too: controller-runtime's multi-namespace cache asks the mapper for the
		// scope of the list type itself.
		list := k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List")
		m.AddSpecific(list, k.gvk.GroupVersion().WithResource(k.plural), k.gvk.GroupVersion().WithResource(k.singular), k.scope)
	}
	return m
}

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
	cached  client.Reader
	live    client.Client
	scheme  *runtime.Scheme
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

func (s *spoke) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.cached.Get(ctx, key, obj, opts...)
}

func (s *spoke) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.cached.List(ctx, list, opts...)
}

func (s *spoke) Live() client.Reader { return liveReader{s} }

func (s *spoke) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := s.check(); err != nil {
		return err
	}
	gvk, err := apiutil.GVKForObject(obj, s.scheme)
	if err != nil {
		return err
	}
	if gvk != gvkNode && gvk != gvkMachine {
		return fmt.Errorf("%w: patch %s %s", ErrRequestNotAllowed, gvk.Kind, client.ObjectKeyFromObject(obj))
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.live.Patch(ctx, obj, patch, opts...)
}

func (s *spoke) Server() string { return s.server }

type liveReader struct{ s *spoke }

func (l liveReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := l.s.check(); err != nil {
		return err
	}
	ctx, cancel := l.s.bound(ctx)
	defer cancel()
	return l.s.live.Get(ctx, key, obj, opts...)
}

func (l liveReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := l.s.check(); err != nil {
		return err
	}
	ctx, cancel := l.s.bound(ctx)
	defer cancel()
	return l.s.live.List(ctx, list, opts...)
}
