package remote

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"iter"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unique"
	"unsafe"

	"github.com/go-logr/logr"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
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

// spokeCache is one spoke's trimmed cache: a list-and-watch loop per kind (kindLoop) feeding a
// compact store. It replaces a controller-runtime cache, which for three kinds runs about 40
// goroutines and three 16 KiB event rings per spoke; this runs one goroutine per kind and keeps
// each object as a record of the fields the planner reads.
type spokeCache struct {
	stores []*kindStore
	loops  []*kindLoop
	packer *packer // packs the stores' records once the spoke goes quiet (pack.go)
}

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

// Nodes come in protobuf (a core type); Machines in JSON (a custom resource, of which the
// planner reads the spec and status); MachineSets as metadata only, in protobuf: the planner
// reads their name, uid and labels, and a full MachineSet is mostly its template's
// providerSpec, which costs JSON decoding on every list and event and a buffer the size of
// the largest one per watch.
var spokeKinds = []kindSpec{
	{gvk: gvkNode, resource: "nodes", accept: runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON},
	{gvk: gvkMachine, resource: "machines", namespace: MachineAPINamespace, selector: machineSelector,
		accept: runtime.ContentTypeJSON}, // decoded as machineJSON
	{gvk: gvkMachineSet, resource: "machinesets", namespace: MachineAPINamespace, selector: machineSetSelector,
		metadataOnly: true, accept: partialObjectMetadataAccept},
}

// partialObjectMetadataAccept asks for PartialObjectMetadata, as client-go's metadata client does.
const partialObjectMetadataAccept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1," +
	"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// newSpokeCache builds the cache; it does no I/O until Start. notify is called (from the
// loops' goroutines) after each change that makes a difference to a record, except
// during the first list.
// log gets cluster as a field at each call (see Manager.run for why it is not bound).
func newSpokeCache(cfg *rest.Config, hc *http.Client, codecs serializer.CodecFactory, log logr.Logger, cluster string, notify func()) (*spokeCache, error) {
	sc := &spokeCache{packer: newPacker(packQuiet)}
	base := newWatchHeader(cfg)
	mc, err := metadata.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	for _, k := range spokeKinds {
		rc, err := apiutil.RESTClientForGVK(k.gvk, false, false, cfg, codecs, hc)
		if err != nil {
			return nil, err
		}
		st := &kindStore{spec: k, rc: rc, header: base, notify: notify, packer: sc.packer, items: map[string]*record{}, synced: make(chan struct{})}
		sc.packer.stores = append(sc.packer.stores, st)
		request := func(o *metav1.ListOptions) *rest.Request {
			o.LabelSelector = k.selector
			return st.request(rc.Get(), k.namespace).VersionedParams(o, metav1.ParameterCodec)
		}
		loop := &kindLoop{store: st, log: log, cluster: cluster, clock: clock.RealClock{}}
		neg := runtime.NewClientNegotiator(codecs.WithoutConversion(), k.gvk.GroupVersion())
		var events func(io.ReadCloser) eventDecoder
		switch {
		case k.metadataOnly:
			r := mc.Resource(k.gvk.GroupVersion().WithResource(k.resource)).Namespace(k.namespace)
			loop.list = listItems(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = k.selector
				return r.List(ctx, o)
			})
			neg = runtime.NewClientNegotiator(metainternalversionscheme.Codecs.WithoutConversion(), metav1.SchemeGroupVersion)
		case k.gvk == gvkMachine:
			loop.list = func(ctx context.Context, o metav1.ListOptions) ([]*record, string, error) {
				res := request(&o).SetHeader("Accept", runtime.ContentTypeJSON).Do(ctx)
				if err := res.Error(); err != nil {
					return nil, "", err // with the server's Status, which Raw's error lacks
				}
				body, _ := res.Raw()
				items, rv, err := decodeMachineList(body)
				if err != nil {
					return nil, "", err
				}
				recs, err := compactAll(items)
				return recs, rv, err
			}
			events = func(body io.ReadCloser) eventDecoder { return newMachineEvents(body) }
		case k.gvk == gvkNode:
			loop.list = func(ctx context.Context, o metav1.ListOptions) ([]*record, string, error) {
				var contentType string
				res := request(&o).Do(ctx).ContentType(&contentType)
				if err := res.Error(); err != nil {
					return nil, "", err
				}
				body, _ := res.Raw()
				return decodeNodeList(body, contentType)
			}
		default:
			return nil, fmt.Errorf("no list for %s", k.gvk)
		}
		header := base
		header.accept = k.accept
		loop.watch = streamWatch(hc, cfg.RateLimiter, neg, header, request, events)
		sc.stores = append(sc.stores, st)
		sc.loops = append(sc.loops, loop)
	}
	return sc, nil
}

// watchHeader is what a watch request carries: its Accept, and the user agent and bearer
// token that client-go's transport wrappers would add. A wrapper that adds a header clones
// the request first, and x/net keeps the request it is given for as long as the stream is
// open: with a token, two clones of each watch request (about 1.5 KiB a watch, 9 MiB at
// 2,000 clusters in make bench's heap profile), each with its own "Bearer " string, lived as
// long as the watch. With the headers already there, the wrappers pass the request on as it
// is, and a spoke's watches share one "Bearer " string. A token can only be inline (a
// kubeconfig naming a token file is refused), so it never changes under a connection.
type watchHeader struct{ accept, userAgent, authorization string }

// newWatchHeader returns a spoke's watch header without its Accept: the spoke's kinds set
// theirs, and share its one "Bearer " string.
func newWatchHeader(cfg *rest.Config) watchHeader {
	h := watchHeader{userAgent: cfg.UserAgent}
	if cfg.BearerToken != "" {
		h.authorization = "Bearer " + cfg.BearerToken
	}
	return h
}

// build returns a new header for one request: what h has of its Accept, user agent and token.
func (h watchHeader) build() http.Header {
	out := make(http.Header, 3)
	h.each(func(k, v string) { out[k] = []string{v} })
	return out
}

// each calls set with each header h has (in canonical form), leaving out the empty ones.
func (h watchHeader) each(set func(k, v string)) {
	for _, kv := range [...][2]string{{"Accept", h.accept}, {"User-Agent", h.userAgent}, {"Authorization", h.authorization}} {
		if kv[1] != "" {
			set(kv[0], kv[1])
		}
	}
}

// Start runs the loops until ctx is done (the last one in the calling goroutine).
func (sc *spokeCache) Start(ctx context.Context) {
	defer sc.packer.stop()
	var wg sync.WaitGroup
	last := len(sc.loops) - 1
	for _, l := range sc.loops[:last] {
		wg.Go(func() { l.run(ctx) })
	}
	sc.loops[last].run(ctx)
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
	return nil, fmt.Errorf("%T is not read on a spoke: only Nodes, and Machines and MachineSets in %s, are", obj, MachineAPINamespace)
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

// kindStore is one kind's records by name (Machines and MachineSets are all in one namespace),
// filled by its kindLoop, and the kind's REST client, which the loop and the Spoke's live
// reads and patches share.
type kindStore struct {
	spec   kindSpec
	rc     rest.Interface
	header watchHeader // the user agent and bearer token of its requests (request)
	notify func()
	packer *packer // nil: records are not packed

	mu     sync.RWMutex
	items  map[string]*record
	synced chan struct{} // closed by the first Replace
	once   sync.Once
}

// request aims r at the kind's resource, in namespace when the kind is namespaced (every
// namespace when it is empty), with the user agent and bearer token already set: client-go's
// user-agent and bearer-token wrappers then pass it on as it is, where each would clone it
// (request and header) to add its own, for as long as it is in flight (see watchHeader). A
// kubeconfig with impersonation or a username and password still has a wrapper that clones.
func (s *kindStore) request(r *rest.Request, namespace string) *rest.Request {
	r = r.NamespaceIfScoped(namespace, s.spec.namespace != "").Resource(s.spec.resource)
	s.header.each(func(k, v string) { r = r.SetHeader(k, v) })
	return r
}

func (s *kindStore) Add(obj any) error {
	r, err := compact(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old := s.items[r.name()]
	differs := old == nil || r.shareWith(old)
	kept := !differs && old.takeVersion(r)
	if !kept {
		s.items[r.name()] = r // after shareWith: the key is then cut from the string r keeps
	}
	s.mu.Unlock()
	if differs {
		s.changed()
	}
	if !kept {
		s.packer.touch(1)
	}
	return nil
}

func (s *kindStore) Delete(obj any) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	name := m.GetName()
	s.mu.Lock()
	_, had := s.items[name]
	delete(s.items, name)
	s.mu.Unlock()
	if had {
		s.changed()
		s.packer.touch(1)
	}
	return nil
}

// Replace swaps in the records of a fresh list. The first one marks the kind synced (the
// connect is notified by the Manager); a later one (a re-list) notifies if anything differs.
func (s *kindStore) Replace(list []*record) {
	s.mu.RLock()
	old := s.items // only this kind's loop writes the store, so old stays what it is
	s.mu.RUnlock()
	items := make(map[string]*record, len(list))
	differs := len(old) != len(list)
	made := 0
	for _, r := range list {
		o := old[r.name()]
		if o == nil || r.shareWith(o) {
			differs = true
		} else if o.takeVersion(r) {
			items[r.name()] = o
			continue
		}
		items[r.name()] = r // after shareWith, as in Add
		made++
	}
	s.mu.Lock()
	s.items = items
	s.mu.Unlock()
	s.packer.touch(made + max(len(old)-len(list), 0))
	first := false
	s.once.Do(func() { first = true; close(s.synced) })
	if !first && differs {
		s.changed()
	}
}

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
	// id packs the object's name, uid and providerID, each behind its length (appendField),
	// into one string made here: one allocation a record instead of three strings that
	// point into the decoded object's memory, all of which an update keeps (shareWith).
	id string
	// rv is the resourceVersion when it is a canonical decimal (etcd's always are); 0 when it
	// is not, and then id holds it as a fourth field. It is the one field of a published
	// record that changes (takeVersion).
	rv          atomic.Uint64
	labels      pairs
	annotations pairs // only those keptAnnotation keeps
	deletion    *metav1.Time
	taints      taintList      // Node spec.taints, Machine spec.taints
	machine     *machineFields // Machine only: Nodes and MachineSets do not pay for these
	health      nodeHealth     // Node only: readiness and spec.unschedulable, for the NoExecute health gate
}

// nodeHealth keeps what the NoExecute health gate reads of a Node: whether its Ready
// condition is False or Unknown, and spec.unschedulable. A Node without a Ready condition
// (one kubelet has not reported on yet) counts as ready: there is nothing to judge it by.
// Only a change of these notifies: a status heartbeat that leaves them as they were does not.
type nodeHealth uint8

const (
	healthReadyFalse nodeHealth = 1 << iota
	healthReadyUnknown
	healthUnschedulable
)

func healthOf(n *corev1.Node) nodeHealth {
	var h nodeHealth
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		switch c.Status {
		case corev1.ConditionFalse:
			h |= healthReadyFalse
		case corev1.ConditionUnknown:
			h |= healthReadyUnknown
		}
	}
	if n.Spec.Unschedulable {
		h |= healthUnschedulable
	}
	return h
}

// setIdentity sets id and rv. id is allocated at its exact size: a string made from a byte
// slice keeps the slice's whole capacity.
func (r *record) setIdentity(name, uid, rv, providerID string) {
	fields := [...]string{name, uid, providerID, rv}
	n := len(fields) // the resourceVersion is kept in id as it came, unless it is a number
	r.rv.Store(0)
	if v, err := strconv.ParseUint(rv, 10, 64); err == nil && v != 0 && strconv.FormatUint(v, 10) == rv {
		r.rv.Store(v)
		n = len(fields) - 1
	}
	size := 0
	for _, f := range fields[:n] {
		size += fieldSize(f)
	}
	b := make([]byte, 0, size)
	for _, f := range fields[:n] {
		b = appendField(b, f)
	}
	r.id = unsafe.String(unsafe.SliceData(b), len(b)) // b is this record's alone, and never written again
}

// identity returns the fields of id.
func (r *record) identity() (name, uid, providerID, rest string) {
	name, rest = nextField(r.id)
	uid, rest = nextField(rest)
	providerID, rest = nextField(rest)
	return name, uid, providerID, rest
}

func (r *record) name() string {
	name, _ := nextField(r.id)
	return name
}

func (r *record) resourceVersion() string {
	if v := r.rv.Load(); v != 0 {
		return strconv.FormatUint(v, 10)
	}
	_, _, _, rest := r.identity()
	rv, _ := nextField(rest)
	return rv
}

// machineFields are what a record keeps of a Machine beyond what every kind has.
type machineFields struct {
	owners     []metav1.OwnerReference
	nodeLabels pairs  // spec.metadata.labels
	nodeName   string // status.nodeRef.name (the planner reads only the name)
	phase      string // status.phase, when hasPhase (kept as a value: a pointer would be an object of its own)
	hasPhase   bool
}

// sameContent reports whether two records differ in more than resourceVersion (a Node
// heartbeat changes only status, which is not kept, so it is not worth a notification).
func (r *record) sameContent(o *record) bool { return !r.compare(o, false) }

// takeVersion stores u's resourceVersion in r, when u, an update of r that shareWith found
// to differ in nothing else, holds it as a number, as r does (then u's id is r's): the update
// then costs no record. It reports whether it did.
func (r *record) takeVersion(u *record) bool {
	if r.id != u.id {
		return false
	}
	r.rv.Store(u.rv.Load())
	return true
}

// shareWith points r's fields at old's wherever the two hold the same values, and reports
// whether r differs from old in more than its resourceVersion. r must not be published yet.
// An update then keeps what it did not change in old's memory, not in a second copy made
// among the update's short-lived garbage: Go's heap does not move objects, so such a copy
// would hold a mostly empty span of the heap in use for as long as the record lives. (A
// Node's status heartbeat changes nothing a record keeps but its resourceVersion; a pool
// change on a fleet in sync, a few labels and one annotation of each object.)
func (r *record) shareWith(old *record) (differs bool) { return r.compare(old, true) }

// compare reports whether r differs from old in more than its resourceVersion; with share,
// it also points r's equal fields at old's (shareWith).
func (r *record) compare(old *record, share bool) (differs bool) {
	eq := equality.Semantic.DeepEqual
	name, uid, providerID, _ := r.identity()
	oldName, oldUID, oldProviderID, _ := old.identity()
	differs = name != oldName || uid != oldUID || providerID != oldProviderID
	shareField(share, &r.id, old.id, r.id == old.id) // differs only in a resourceVersion that is not a number
	differs = shareField(share, &r.labels, old.labels, r.labels.equal(old.labels)) || differs
	differs = shareField(share, &r.annotations, old.annotations, r.annotations.equal(old.annotations)) || differs
	differs = shareField(share, &r.deletion, old.deletion, eq(r.deletion, old.deletion)) || differs
	differs = r.taints != old.taints || differs // a handle: nothing to share
	differs = r.health != old.health || differs
	return shareField(share, &r.machine, old.machine, r.machine.equal(old.machine)) || differs
}

// shareField sets *field to old when same (and share is set), and reports whether they differ.
func shareField[T any](share bool, field *T, old T, same bool) (differs bool) {
	if same && share {
		*field = old
	}
	return !same
}

func (m *machineFields) equal(o *machineFields) bool {
	if m == nil || o == nil {
		return m == o
	}
	eq := equality.Semantic.DeepEqual
	return m.nodeName == o.nodeName && m.nodeLabels.equal(o.nodeLabels) && eq(m.owners, o.owners) && m.phase == o.phase && m.hasPhase == o.hasPhase
}

func (r *record) meta(namespace string) metav1.ObjectMeta {
	name, uid, _, _ := r.identity()
	m := metav1.ObjectMeta{
		Namespace:       namespace,
		Name:            name,
		UID:             types.UID(uid),
		ResourceVersion: r.resourceVersion(),
		Labels:          r.labels.toMap(),
		Annotations:     r.annotations.toMap(),
	}
	m.DeletionTimestamp = r.deletion.DeepCopy()
	return m
}

// asNode, asMachine and asMachineSet expand a record into a new object the caller owns.
func (r *record) asNode() corev1.Node {
	n := corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvkNode.GroupVersion().String(), Kind: gvkNode.Kind},
		ObjectMeta: r.meta(""),
		Spec:       corev1.NodeSpec{Taints: taintsOf(r.taints), Unschedulable: r.health&healthUnschedulable != 0},
	}
	_, _, n.Spec.ProviderID, _ = r.identity()
	switch {
	case r.health&healthReadyFalse != 0:
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	case r.health&healthReadyUnknown != 0:
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
	}
	return n
}

func (r *record) asMachine() machinev1beta1.Machine {
	m := machinev1beta1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvkMachine.GroupVersion().String(), Kind: gvkMachine.Kind},
		ObjectMeta: r.meta(MachineAPINamespace),
		Spec: machinev1beta1.MachineSpec{
			Taints: taintsOf(r.taints),
		},
	}
	if _, _, providerID, _ := r.identity(); providerID != "" {
		m.Spec.ProviderID = &providerID
	}
	mf := r.machine
	if mf == nil {
		return m
	}
	m.Spec.ObjectMeta.Labels = mf.nodeLabels.toMap()
	if mf.hasPhase {
		m.Status.Phase = ptr.To(mf.phase)
	}
	if mf.nodeName != "" {
		m.Status.NodeRef = &corev1.ObjectReference{Kind: gvkNode.Kind, Name: mf.nodeName}
	}
	if len(mf.owners) > 0 {
		m.OwnerReferences = make([]metav1.OwnerReference, len(mf.owners))
		for i := range mf.owners {
			mf.owners[i].DeepCopyInto(&m.OwnerReferences[i])
		}
	}
	return m
}

func (r *record) asMachineSet() machinev1beta1.MachineSet {
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

// pairs is a string map held sorted by key in two parts. A pair that repeats across the Nodes
// and Machines of a fleet (role, instance type, zone, pool labels) is interned: 8 bytes a
// label, a handle to the one copy of that pair the process holds, where two strings would take
// 32 and a small Go map about twice that. A pair that is one object's own (ownPair: its
// hostname label, its nodelink annotation) would be found once, and an entry of the unique map
// costs about 270 bytes in 8 heap objects (measured with Go 1.26), so those are packed into
// own, one string: each key and value behind its length as a uvarint.
type pairs struct {
	shared []unique.Handle[pair]
	own    string
}

type pair struct{ key, value string }

func (p pairs) equal(o pairs) bool { return p.own == o.own && slices.Equal(p.shared, o.shared) }

// all yields every pair: the interned ones, then the object's own.
func (p pairs) all() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, h := range p.shared {
			kv := h.Value()
			if !yield(kv.key, kv.value) {
				return
			}
		}
		for rest := p.own; rest != ""; {
			var k, v string
			k, rest = nextField(rest)
			v, rest = nextField(rest)
			if !yield(k, v) {
				return
			}
		}
	}
}

// len returns how many pairs p holds.
func (p pairs) len() int {
	n := len(p.shared)
	for rest := p.own; rest != ""; n++ {
		_, rest = nextField(rest)
		_, rest = nextField(rest)
	}
	return n
}

// toMap returns a new map the caller owns (nil when empty), made at its size: grown pair by
// pair instead, a Node's labels were copied through two smaller tables first, and these copies
// are made on every reconcile.
func (p pairs) toMap() map[string]string {
	n := p.len()
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	maps.Insert(m, p.all())
	return m
}

var _ labels.Labels = (*pairs)(nil)

// Lookup, Has and Get make *pairs a labels.Labels: a label selector matches a record without
// a map made for it.
func (p *pairs) Lookup(key string) (string, bool) {
	for k, v := range p.all() {
		if k == key {
			return v, true
		}
	}
	return "", false
}

func (p *pairs) Has(key string) bool {
	_, ok := p.Lookup(key)
	return ok
}

func (p *pairs) Get(key string) string {
	v, _ := p.Lookup(key)
	return v
}

// appendField appends s behind its length.
func appendField(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// fieldSize is how many bytes appendField adds for s.
func fieldSize(s string) int {
	var length [binary.MaxVarintLen64]byte
	return binary.PutUvarint(length[:], uint64(len(s))) + len(s)
}

// nextField reads what appendField wrote at the start of packed and returns it, and the rest.
func nextField(packed string) (field, rest string) {
	n, w := binary.Uvarint(unsafe.Slice(unsafe.StringData(packed), len(packed))) // read, never written
	return packed[w : w+int(n)], packed[w+int(n):]
}
