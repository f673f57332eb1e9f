package spokecache

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Cache is one spoke's trimmed cache: a list-and-watch loop per kind (kindLoop) feeding a
// compact store. It replaces a controller-runtime cache, which for three kinds runs about 40
// goroutines and three 16 KiB event rings per spoke; this runs one goroutine per kind and keeps
// each object as a record of the fields the planner reads.
type Cache struct {
	stores []*kindStore
	loops  []*kindLoop
}

// kind is a kind a spoke is read for, and how its codec is built.
type kind struct {
	spec  kindSpec
	codec func(codecDeps) codec
}

// spokeKinds are the kinds a spoke is read for; each file of nodes.go, machines.go and
// machinesets.go says how its kind is read, and why so.
var spokeKinds = []kind{
	{spec: nodeSpec, codec: newNodeCodec},
	{spec: machineSpec, codec: newMachineCodec},
	{spec: machineSetSpec, codec: newMachineSetCodec},
}

// New builds the cache over the spoke's kind clients (one for each of spokeKinds,
// in order); it does no I/O until Start. notify is called (from the loops' goroutines) after
// each change that makes a difference to a record, except during the first list. clk drives
// the loops' backoff.
// log gets cluster as a field at each call (see Manager.run for why it is not bound).
func New(cfg *rest.Config, hc *http.Client, clients []*KindClient, codecs serializer.CodecFactory, log logr.Logger, cluster string, clk clock.Clock, notify func()) (*Cache, error) {
	sc := &Cache{}
	mc, err := metadata.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	if len(clients) != len(spokeKinds) {
		return nil, fmt.Errorf("%d kind clients for %d kinds", len(clients), len(spokeKinds))
	}
	for i, kc := range clients {
		st := &kindStore{spec: kc.spec, notify: notify, items: map[string]*record{}, synced: make(chan struct{})}
		c := spokeKinds[i].codec(codecDeps{kc: kc, mc: mc, codecs: codecs})
		loop := newKindLoop(kc, st, c, hc, cfg.RateLimiter, clk, log, cluster)
		sc.stores = append(sc.stores, st)
		sc.loops = append(sc.loops, loop)
	}
	return sc, nil
}

// Start runs the loops until ctx is done (the last one in the calling goroutine).
func (sc *Cache) Start(ctx context.Context) {
	var wg sync.WaitGroup
	last := len(sc.loops) - 1
	for _, l := range sc.loops[:last] {
		wg.Go(func() { l.run(ctx) })
	}
	sc.loops[last].run(ctx)
	wg.Wait()
}

// WaitForCacheSync waits until every kind has been listed once, or ctx is done.
func (sc *Cache) WaitForCacheSync(ctx context.Context) bool {
	for _, st := range sc.stores {
		select {
		case <-st.synced:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (sc *Cache) storeFor(obj runtime.Object) (*kindStore, error) {
	return kindFor(sc.stores, func(st *kindStore) kindSpec { return st.spec }, obj)
}

// Get returns a copy of one cached (trimmed) object.
func (sc *Cache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	st, err := sc.storeFor(obj)
	if err != nil {
		return err
	}
	st.mu.RLock()
	r := st.items[key.Name]
	st.mu.RUnlock()
	if r == nil || key.Namespace != st.spec.namespace {
		return apierrors.NewNotFound(schema.GroupResource{Group: st.spec.gvk.Group, Resource: st.spec.resource}, key.Name)
	}
	switch o := obj.(type) {
	case *corev1.Node:
		*o = r.asNode()
	case *machinev1beta1.Machine:
		*o = r.asMachine()
	case *machinev1beta1.MachineSet:
		*o = r.asMachineSet()
	}
	return nil
}

// List returns copies of the cached (trimmed) objects, sorted by name. It honours a namespace
// and a label selector; a field selector is refused.
func (sc *Cache) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	st, err := sc.storeFor(list)
	if err != nil {
		return err
	}
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	if lo.FieldSelector != nil && !lo.FieldSelector.Empty() {
		return fmt.Errorf("the spoke cache does not support field selectors")
	}
	st.mu.RLock()
	recs := make([]*record, 0, len(st.items))
	if lo.Namespace == "" || st.spec.namespace == "" || lo.Namespace == st.spec.namespace {
		for _, r := range st.items {
			if lo.LabelSelector == nil || lo.LabelSelector.Matches(&r.labels) {
				recs = append(recs, r)
			}
		}
	}
	st.mu.RUnlock()
	slices.SortFunc(recs, func(a, b *record) int { return strings.Compare(a.name(), b.name()) })
	switch l := list.(type) {
	case *corev1.NodeList:
		l.Items = make([]corev1.Node, len(recs))
		for i, r := range recs {
			l.Items[i] = r.asNode()
		}
	case *machinev1beta1.MachineList:
		l.Items = make([]machinev1beta1.Machine, len(recs))
		for i, r := range recs {
			l.Items[i] = r.asMachine()
		}
	case *machinev1beta1.MachineSetList:
		l.Items = make([]machinev1beta1.MachineSet, len(recs))
		for i, r := range recs {
			l.Items[i] = r.asMachineSet()
		}
	}
	return nil
}

// NewKindClients builds one REST client for each of spokeKinds, over hc. It does no I/O.
func NewKindClients(cfg *rest.Config, hc *http.Client, codecs serializer.CodecFactory) ([]*KindClient, error) {
	header := newWatchHeader(cfg)
	out := make([]*KindClient, len(spokeKinds))
	for i, k := range spokeKinds {
		rc, err := apiutil.RESTClientForGVK(k.spec.gvk, false, false, cfg, codecs, hc)
		if err != nil {
			return nil, err
		}
		out[i] = &KindClient{spec: k.spec, rc: rc, header: header}
	}
	return out, nil
}
