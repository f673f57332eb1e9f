package remote

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/pkg/remote/spokecache"
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

type spoke struct {
	cluster string
	server  string
	// cache serves the cached reads; clients (one a kind) the live reads and the patches.
	cache   *spokecache.Cache
	clients []*spokecache.KindClient
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

// Patch sends the patch through the kind's client (spokecache.KindClient.Patch), which checks
// the answer but does not decode it into obj.
func (s *spoke) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := s.check(); err != nil {
		return err
	}
	kc, err := spokecache.ClientFor(s.clients, obj)
	if err != nil || (kc.Kind() != spokecache.GVKNode && kc.Kind() != spokecache.GVKMachine) {
		return fmt.Errorf("%w: patch %T %s", ErrRequestNotAllowed, obj, client.ObjectKeyFromObject(obj))
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return kc.Patch(ctx, obj, patch, opts...)
}

func (s *spoke) Server() string { return s.server }

// liveReader reads straight from the spoke API server, through the kind clients.
type liveReader struct{ s *spoke }

func (l liveReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := l.s.check(); err != nil {
		return err
	}
	kc, err := spokecache.ClientFor(l.s.clients, obj)
	if err != nil {
		return err
	}
	ctx, cancel := l.s.bound(ctx)
	defer cancel()
	return kc.Get(ctx, key, obj, opts...)
}

func (l liveReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := l.s.check(); err != nil {
		return err
	}
	kc, err := spokecache.ClientFor(l.s.clients, list)
	if err != nil {
		return err
	}
	ctx, cancel := l.s.bound(ctx)
	defer cancel()
	return kc.List(ctx, list, opts...)
}
