package remote

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unique"

	"github.com/go-logr/logr"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// The cache holds only what sync.Targets can map to a pool: MachineSets that Hive labels with
// their pool, and Machines that a MachineSet labels as its own (control-plane Machines and
// MachineSets nobody manages through a pool are never read). Every Node is held: whether a
// Node belongs to a pool is known only from its Machine.
const (
	machineSetSelector = nmsync.LabelMachinePool
	machineSelector    = nmsync.LabelMachineSet
)

// spokeCache is one spoke's trimmed cache: a client-go Reflector per kind (list, then watch,
// re-list on expiry) feeding a compact store. It replaces a controller-runtime cache, which for
// three kinds runs about 40 goroutines and three 16 KiB event rings per spoke; this runs four
// goroutines per kind and keeps each object as a record of the fields the planner reads.
type spokeCache struct {
	stores     []*kindStore
	reflectors []*toolscache.Reflector
}

type kindSpec struct {
	gvk       schema.GroupVersionKind
	resource  string
	namespace string
	selector  string
	example   runtime.Object
	list      func() runtime.Object
	// metadataOnly lists and watches the kind's metadata only (PartialObjectMetadata, in
	// protobuf): enough when the planner reads nothing else of it.
	metadataOnly bool
}

// Nodes come in protobuf (a core type); Machines in JSON (a custom resource, of which the
// planner reads the spec and status); MachineSets as metadata only, in protobuf: the planner
// reads their name, uid and labels, and a full MachineSet is mostly its template's
// providerSpec, which costs JSON decoding on every list and event and a buffer the size of
// the largest one per watch.
var spokeKinds = []kindSpec{
	{gvk: gvkNode, resource: "nodes", example: &corev1.Node{}, list: func() runtime.Object { return &corev1.NodeList{} }},
	{gvk: gvkMachine, resource: "machines", namespace: MachineAPINamespace, selector: machineSelector,
		example: &machinev1beta1.Machine{}, list: func() runtime.Object { return &machinev1beta1.MachineList{} }},
	{gvk: gvkMachineSet, resource: "machinesets", namespace: MachineAPINamespace, selector: machineSetSelector,
		example: &metav1.PartialObjectMetadata{}, metadataOnly: true},
}

// newSpokeCache builds the cache; it does no I/O until Start. notify is called (from the
// reflectors' goroutines) after each change that makes a difference to a record, except
// during the first list.
func newSpokeCache(cfg *rest.Config, hc *http.Client, codecs serializer.CodecFactory, log logr.Logger, notify func()) (*spokeCache, error) {
	sc := &spokeCache{}
	meta, err := metadata.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	for _, k := range spokeKinds {
		st := &kindStore{spec: k, notify: notify, items: map[string]*record{}, synced: make(chan struct{})}
		var lw *toolscache.ListWatch
		if k.metadataOnly {
			lw = metadataListWatch(meta.Resource(k.gvk.GroupVersion().WithResource(k.resource)).Namespace(k.namespace), k.selector)
		} else {
			rc, err := apiutil.RESTClientForGVK(k.gvk, false, false, cfg, codecs, hc)
			if err != nil {
				return nil, err
			}
			lw = typedListWatch(rc, k)
		}
		l := log.WithValues("kind", k.gvk.Kind)
		sc.stores = append(sc.stores, st)
		sc.reflectors = append(sc.reflectors, toolscache.NewReflectorWithOptions(lw, k.example, st, toolscache.ReflectorOptions{
			Name:   "spoke " + strings.ToLower(k.gvk.Kind) + "s",
			Logger: &l,
		}))
	}
	return sc, nil
}

// typedListWatch lists and watches k's objects whole, with rc.
func typedListWatch(rc rest.Interface, k kindSpec) *toolscache.ListWatch {
	request := func(o *metav1.ListOptions) *rest.Request {
		o.LabelSelector = k.selector
		return rc.Get().NamespaceIfScoped(k.namespace, k.namespace != "").Resource(k.resource).VersionedParams(o, metav1.ParameterCodec)
	}
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := k.list()
			return list, request(&o).Do(ctx).Into(list)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch = true
			return request(&o).Watch(ctx)
		},
	}
}

// metadataListWatch lists and watches the metadata of the objects r serves.
func metadataListWatch(r metadata.ResourceInterface, selector string) *toolscache.ListWatch {
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return r.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return r.Watch(ctx, o)
		},
	}
}

// Start runs the reflectors until ctx is done (the last one in the calling goroutine).
func (sc *spokeCache) Start(ctx context.Context) {
	var wg sync.WaitGroup
	last := len(sc.reflectors) - 1
	for _, r := range sc.reflectors[:last] {
		wg.Go(func() { r.RunWithContext(ctx) })
	}
	sc.reflectors[last].RunWithContext(ctx)
	wg.Wait()
}

// WaitForCacheSync waits until every kind has been listed once, or ctx is done.
func (sc *spokeCache) WaitForCacheSync(ctx context.Context) bool {
	for _, st := range sc.stores {
		select {
		case <-st.synced:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (sc *spokeCache) storeFor(obj runtime.Object) (*kindStore, error) {
	var gvk schema.GroupVersionKind
	switch obj.(type) {
	case *corev1.Node, *corev1.NodeList:
		gvk = gvkNode
	case *machinev1beta1.Machine, *machinev1beta1.MachineList:
		gvk = gvkMachine
	case *machinev1beta1.MachineSet, *machinev1beta1.MachineSetList:
		gvk = gvkMachineSet
	}
	for _, st := range sc.stores {
		if st.spec.gvk == gvk {
			return st, nil
		}
	}
	return nil, fmt.Errorf("%T is not cached: the spoke cache holds only Nodes, and Machines and MachineSets in %s", obj, MachineAPINamespace)
}

// Get returns a copy of one cached (trimmed) object.
func (sc *spokeCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
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
		*o = r.node()
	case *machinev1beta1.Machine:
		*o = r.machine()
	case *machinev1beta1.MachineSet:
		*o = r.machineSet()
	}
	return nil
}

// List returns copies of the cached (trimmed) objects, sorted by name. It honours a namespace
// and a label selector; a field selector is refused.
func (sc *spokeCache) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
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
			if lo.LabelSelector == nil || lo.LabelSelector.Matches(labels.Set(r.labels.toMap())) {
				recs = append(recs, r)
			}
		}
	}
	st.mu.RUnlock()
	slices.SortFunc(recs, func(a, b *record) int { return strings.Compare(a.name, b.name) })
	switch l := list.(type) {
	case *corev1.NodeList:
		l.Items = make([]corev1.Node, len(recs))
		for i, r := range recs {
			l.Items[i] = r.node()
		}
	case *machinev1beta1.MachineList:
		l.Items = make([]machinev1beta1.Machine, len(recs))
		for i, r := range recs {
			l.Items[i] = r.machine()
		}
	case *machinev1beta1.MachineSetList:
		l.Items = make([]machinev1beta1.MachineSet, len(recs))
		for i, r := range recs {
			l.Items[i] = r.machineSet()
		}
	}
	return nil
}

// kindStore is one kind's records by name (Machines and MachineSets are all in one namespace).
// It is the Reflector's store.
type kindStore struct {
	spec   kindSpec
	notify func()

	mu     sync.RWMutex
	items  map[string]*record
	synced chan struct{} // closed by the first Replace
	once   sync.Once
}

var _ toolscache.ReflectorStore = (*kindStore)(nil)

func (s *kindStore) Add(obj any) error {
	r, err := compact(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old := s.items[r.name]
	s.items[r.name] = r
	s.mu.Unlock()
	if old == nil || !old.sameContent(r) {
		s.changed()
	}
	return nil
}

func (s *kindStore) Update(obj any) error { return s.Add(obj) }

func (s *kindStore) Delete(obj any) error {
	var name string
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		_, name, _ = toolscache.SplitMetaNamespaceKey(t.Key)
	} else {
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		name = m.GetName()
	}
	s.mu.Lock()
	_, had := s.items[name]
	delete(s.items, name)
	s.mu.Unlock()
	if had {
		s.changed()
	}
	return nil
}

// Replace swaps in a fresh list. The first one marks the kind synced (the connect is
// notified by the Manager); a later one (a re-list) notifies if anything differs.
func (s *kindStore) Replace(list []any, _ string) error {
	items := make(map[string]*record, len(list))
	for _, obj := range list {
		r, err := compact(obj)
		if err != nil {
			return err
		}
		items[r.name] = r
	}
	s.mu.Lock()
	old := s.items
	s.items = items
	s.mu.Unlock()
	first := false
	s.once.Do(func() { first = true; close(s.synced) })
	if first {
		return nil
	}
	differs := len(old) != len(items)
	for name, r := range items {
		if differs {
			break
		}
		o := old[name]
		differs = o == nil || !o.sameContent(r)
	}
	if differs {
		s.changed()
	}
	return nil
}

func (s *kindStore) Resync() error { return nil }

func (s *kindStore) changed() {
	select {
	case <-s.synced:
		s.notify()
	default: // still listing: the connect notification covers it
	}
}

// record is the compact form of one cached Node, Machine or MachineSet: only the fields the
// planner reads, with label and annotation strings interned (keys and most values repeat
// across every Node of a fleet). Fields a kind does not have stay empty.
type record struct {
	name, uid, rv string
	labels        pairs
	annotations   pairs // only those keptAnnotations keeps
	deletion      *metav1.Time
	taints        []corev1.Taint // Node spec.taints, Machine spec.taints
	providerID    *string        // Node spec.providerID (nil when empty), Machine spec.providerID
	// Machine only.
	owners     []metav1.OwnerReference
	nodeLabels pairs // spec.metadata.labels
	nodeRef    *corev1.ObjectReference
	phase      *string
}

// compact keeps what label and taint reconciliation needs, so a spoke with thousands of Nodes
// costs little hub memory:
//
//   - Node: name, uid, resourceVersion, labels, the kept annotations, deletionTimestamp,
//     spec.taints and spec.providerID (status, images, conditions... are dropped);
//   - Machine: the same plus ownerReferences, spec.metadata.labels, status.nodeRef and
//     status.phase (providerSpec and providerStatus are dropped);
//   - MachineSet: name, uid, resourceVersion, labels and deletionTimestamp.
//
// Consequence for callers: cached objects are not complete. Never Update from them; compute
// patches (merge patches from a cached base diff only the fields that exist in both) or read
// Live.
func compact(obj any) (*record, error) {
	switch o := obj.(type) {
	case *corev1.Node:
		r := compactMeta(&o.ObjectMeta)
		r.taints = internTaints(o.Spec.Taints)
		if p := o.Spec.ProviderID; p != "" {
			r.providerID = &p // a copy: a pointer into o would keep the whole decoded Node alive
		}
		return r, nil
	case *machinev1beta1.Machine:
		r := compactMeta(&o.ObjectMeta)
		r.taints = internTaints(o.Spec.Taints)
		r.providerID = o.Spec.ProviderID
		r.owners = slices.Clone(o.OwnerReferences)
		for i := range r.owners {
			ref := &r.owners[i]
			ref.APIVersion, ref.Kind, ref.Name, ref.UID = intern(ref.APIVersion), intern(ref.Kind), intern(ref.Name), interned(ref.UID)
		}
		r.nodeLabels = pairsOf(o.Spec.ObjectMeta.Labels)
		r.nodeRef = o.Status.NodeRef
		if o.Status.Phase != nil {
			p := intern(*o.Status.Phase)
			r.phase = &p
		}
		return r, nil
	case *machinev1beta1.MachineSet: // kept as its metadata is (the cache watches only that)
		return compact(&metav1.PartialObjectMetadata{ObjectMeta: o.ObjectMeta})
	case *metav1.PartialObjectMetadata: // a MachineSet's metadata
		r := compactMeta(&o.ObjectMeta)
		r.annotations = nil
		return r, nil
	}
	return nil, fmt.Errorf("unexpected %T in the spoke cache", obj)
}

func compactMeta(m *metav1.ObjectMeta) *record {
	return &record{
		name:        m.Name,
		uid:         string(m.UID),
		rv:          m.ResourceVersion,
		labels:      pairsOf(m.Labels),
		annotations: pairsOf(keptAnnotations(m.Annotations)),
		deletion:    m.DeletionTimestamp,
	}
}

// sameContent reports whether two records differ in more than resourceVersion (a Node
// heartbeat changes only status, which is not kept, so it is not worth a notification).
func (r *record) sameContent(o *record) bool {
	eq := equality.Semantic.DeepEqual
	return r.name == o.name && r.uid == o.uid &&
		slices.Equal(r.labels, o.labels) && slices.Equal(r.annotations, o.annotations) && slices.Equal(r.nodeLabels, o.nodeLabels) &&
		eq(r.deletion, o.deletion) && eq(r.taints, o.taints) && eq(r.providerID, o.providerID) &&
		eq(r.owners, o.owners) && eq(r.nodeRef, o.nodeRef) && eq(r.phase, o.phase)
}

func (r *record) meta(namespace string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Namespace:       namespace,
		Name:            r.name,
		UID:             types.UID(r.uid),
		ResourceVersion: r.rv,
		Labels:          r.labels.toMap(),
		Annotations:     r.annotations.toMap(),
	}
	m.DeletionTimestamp = r.deletion.DeepCopy()
	return m
}

// node, machine and machineSet expand a record into a new object the caller owns.
func (r *record) node() corev1.Node {
	n := corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvkNode.GroupVersion().String(), Kind: gvkNode.Kind},
		ObjectMeta: r.meta(""),
		Spec:       corev1.NodeSpec{Taints: cloneTaints(r.taints)},
	}
	if r.providerID != nil {
		n.Spec.ProviderID = *r.providerID
	}
	return n
}

func (r *record) machine() machinev1beta1.Machine {
	m := machinev1beta1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvkMachine.GroupVersion().String(), Kind: gvkMachine.Kind},
		ObjectMeta: r.meta(MachineAPINamespace),
		Spec: machinev1beta1.MachineSpec{
			ObjectMeta: machinev1beta1.ObjectMeta{Labels: r.nodeLabels.toMap()},
			Taints:     cloneTaints(r.taints),
			ProviderID: clonePtr(r.providerID),
		},
		Status: machinev1beta1.MachineStatus{Phase: clonePtr(r.phase), NodeRef: r.nodeRef.DeepCopy()},
	}
	if len(r.owners) > 0 {
		m.OwnerReferences = make([]metav1.OwnerReference, len(r.owners))
		for i := range r.owners {
			r.owners[i].DeepCopyInto(&m.OwnerReferences[i])
		}
	}
	return m
}

func (r *record) machineSet() machinev1beta1.MachineSet {
	return machinev1beta1.MachineSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvkMachineSet.GroupVersion().String(), Kind: gvkMachineSet.Kind},
		ObjectMeta: r.meta(MachineAPINamespace),
	}
}

// intern returns the canonical copy of s, so the same label key or value held by thousands
// of cached objects is stored once.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

func interned[T ~string](s T) T { return T(intern(string(s))) }

// pairs is a string map held as interned key, value, key, value... sorted by key: 32 bytes a
// label, about half of what a small Go map costs.
type pairs []string

func pairsOf(m map[string]string) pairs {
	if len(m) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(m))
	p := make(pairs, 0, 2*len(m))
	for _, k := range keys {
		p = append(p, intern(k), intern(m[k]))
	}
	return p
}

// toMap returns a new map the caller owns (nil when empty).
func (p pairs) toMap() map[string]string {
	if len(p) == 0 {
		return nil
	}
	m := make(map[string]string, len(p)/2)
	for i := 0; i < len(p); i += 2 {
		m[p[i]] = p[i+1]
	}
	return m
}

func internTaints(in []corev1.Taint) []corev1.Taint {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Taint, len(in))
	for i, t := range in {
		out[i] = corev1.Taint{Key: intern(t.Key), Value: intern(t.Value), Effect: interned(t.Effect), TimeAdded: t.TimeAdded}
	}
	return out
}

func cloneTaints(in []corev1.Taint) []corev1.Taint {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Taint, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// keptAnnotations keeps only the annotations the planner reads: this
// controller's bookkeeping (hub-node-metadata.openshift.io/*) and
// nodelink's machine.openshift.io/machine. Real Nodes carry kilobytes of
// others' annotations (OVN, MCO, CSI) that would cost hub memory per spoke.
func keptAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, nmsync.KeyPrefix) || k == nmsync.AnnotationNodeMachine {
			if out == nil {
				out = make(map[string]string, 4)
			}
			out[k] = v
		}
	}
	return out
}
