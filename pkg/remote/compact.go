package remote

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unique"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// compact keeps what label and taint reconciliation needs, so a spoke with thousands of Nodes
// costs little hub memory:
//
//   - Node: name, uid, resourceVersion, labels, the kept annotations, deletionTimestamp,
//     spec.taints and spec.providerID (status, images, conditions... are dropped);
//   - Machine: the same plus ownerReferences, spec.metadata.labels, status.nodeRef's name and
//     status.phase (providerSpec and providerStatus are dropped);
//   - MachineSet: name, uid, resourceVersion, labels and deletionTimestamp.
//
// Consequence for callers: cached objects are not complete. Never Update from them; compute
// patches (merge patches from a cached base diff only the fields that exist in both) or read
// Live.
func compact(obj any) (*record, error) {
	recs, err := compactAll([]any{obj})
	if err != nil {
		return nil, err
	}
	return recs[0], nil
}

// compactAll compacts a list's objects into records that share a few large allocations (a
// slab): the records, their label handles, taints, times and strings each in one array. A
// list is decoded amid much garbage (every field nobody reads); records allocated a piece at
// a time would be scattered over the memory spans that garbage leaves, and keep them all in
// use: before this, the heap in use was over three times the live heap. A slab lives until
// every record in it has been replaced by a watch event.
func compactAll(objs []any) ([]*record, error) {
	srcs := make([]source, len(objs))
	var n slabSizes
	for i, obj := range objs {
		if err := srcs[i].read(obj); err != nil {
			return nil, err
		}
		srcs[i].count(&n)
	}
	s := slab{
		recs:    make([]record, 0, len(srcs)),
		handles: make([]unique.Handle[pair], 0, n.handles),
		taints:  make([]corev1.Taint, 0, n.taints),
		times:   make([]metav1.Time, 0, n.times),
		ptrs:    make([]string, 0, n.ptrs),
		owners:  make([]metav1.OwnerReference, 0, n.owners),
		text:    make([]byte, 0, n.text),
	}
	if n.machines > 0 {
		s.machines = make([]machineFields, 0, n.machines)
	}
	// Strings first, into one buffer that becomes one string; records take substrings of it.
	spans := make([][5]textSpan, len(srcs))
	for i := range srcs {
		src := &srcs[i]
		spans[i] = [5]textSpan{s.write(src.meta.Name), s.write(string(src.meta.UID)), s.write(src.meta.ResourceVersion), s.write(src.providerIDText()), s.write(src.nodeName())}
	}
	text := string(s.text)
	out := make([]*record, len(srcs))
	for i := range srcs {
		out[i] = s.record(&srcs[i], text, spans[i])
	}
	return out, nil
}

// source is what a record is made from, pointing into the decoded object.
type source struct {
	meta        *metav1.ObjectMeta
	annotations bool // keep the kept annotations (not for MachineSets)
	taints      []corev1.Taint
	providerID  *string
	machine     *machinev1beta1.Machine
}

func (src *source) read(obj any) error {
	switch o := obj.(type) {
	case *corev1.Node:
		*src = source{meta: &o.ObjectMeta, annotations: true, taints: o.Spec.Taints}
		if o.Spec.ProviderID != "" {
			src.providerID = &o.Spec.ProviderID
		}
	case *machinev1beta1.Machine:
		*src = source{meta: &o.ObjectMeta, annotations: true, taints: o.Spec.Taints, providerID: o.Spec.ProviderID, machine: o}
	case *machinev1beta1.MachineSet: // kept as its metadata is (the cache watches only that)
		*src = source{meta: &o.ObjectMeta}
	case *metav1.PartialObjectMetadata: // a MachineSet's metadata
		*src = source{meta: &o.ObjectMeta}
	default:
		return fmt.Errorf("unexpected %T in the spoke cache", obj)
	}
	return nil
}

func (src *source) providerIDText() string {
	if src.providerID == nil {
		return ""
	}
	return *src.providerID
}

func (src *source) nodeName() string {
	if src.machine == nil || src.machine.Status.NodeRef == nil {
		return ""
	}
	return src.machine.Status.NodeRef.Name
}

type slabSizes struct{ handles, taints, times, ptrs, owners, machines, text int }

func (src *source) count(n *slabSizes) {
	m := src.meta
	n.handles += len(m.Labels)
	if src.annotations {
		n.handles += countKept(m.Annotations)
	}
	n.taints += len(src.taints)
	for _, t := range src.taints {
		if t.TimeAdded != nil {
			n.times++
		}
	}
	if m.DeletionTimestamp != nil {
		n.times++
	}
	if src.providerID != nil {
		n.ptrs++
	}
	n.text += len(m.Name) + len(m.UID) + len(m.ResourceVersion) + len(src.providerIDText()) + len(src.nodeName())
	if mc := src.machine; mc != nil {
		n.machines++
		n.handles += len(mc.Spec.ObjectMeta.Labels)
		n.owners += len(mc.OwnerReferences)
		if mc.Status.Phase != nil {
			n.ptrs++
		}
	}
}

// slab carves a list's records out of a few arrays sized for the whole list (appends never
// outgrow them, so pointers into them stay valid).
type slab struct {
	recs     []record
	handles  []unique.Handle[pair]
	taints   []corev1.Taint
	times    []metav1.Time
	ptrs     []string
	owners   []metav1.OwnerReference
	machines []machineFields
	text     []byte
}

type textSpan struct{ from, to int }

func (s *slab) write(str string) textSpan {
	from := len(s.text)
	s.text = append(s.text, str...)
	return textSpan{from, len(s.text)}
}

func (s *slab) record(src *source, text string, sp [5]textSpan) *record {
	str := func(t textSpan) string { return text[t.from:t.to] }
	s.recs = append(s.recs, record{})
	r := &s.recs[len(s.recs)-1]
	m := src.meta
	r.name, r.uid, r.rv = str(sp[0]), str(sp[1]), str(sp[2])
	r.labels = s.pairs(m.Labels, nil)
	if src.annotations {
		r.annotations = s.pairs(m.Annotations, keptAnnotation)
	}
	r.deletion = s.time(m.DeletionTimestamp)
	if len(src.taints) > 0 {
		from := len(s.taints)
		for _, t := range src.taints {
			s.taints = append(s.taints, corev1.Taint{Key: intern(t.Key), Value: intern(t.Value), Effect: interned(t.Effect), TimeAdded: s.time(t.TimeAdded)})
		}
		r.taints = s.taints[from:len(s.taints):len(s.taints)]
	}
	if src.providerID != nil {
		r.providerID = s.ptr(str(sp[3]))
	}
	mc := src.machine
	if mc == nil {
		return r
	}
	s.machines = append(s.machines, machineFields{nodeLabels: s.pairs(mc.Spec.ObjectMeta.Labels, nil), nodeName: str(sp[4])})
	mf := &s.machines[len(s.machines)-1]
	if len(mc.OwnerReferences) > 0 {
		from := len(s.owners)
		for _, o := range mc.OwnerReferences {
			s.owners = append(s.owners, metav1.OwnerReference{
				APIVersion: intern(o.APIVersion), Kind: intern(o.Kind), Name: intern(o.Name), UID: interned(o.UID),
				Controller: sharedBool(o.Controller), BlockOwnerDeletion: sharedBool(o.BlockOwnerDeletion),
			})
		}
		mf.owners = s.owners[from:len(s.owners):len(s.owners)]
	}
	if mc.Status.Phase != nil {
		mf.phase = s.ptr(intern(*mc.Status.Phase))
	}
	r.machine = mf
	return r
}

// sharedBool points at one of two process-wide bools (records never hand theirs out: reads
// deep-copy them), so a record does not keep a byte of its decoded object alive.
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &boolTrue
	default:
		return &boolFalse
	}
}

var boolTrue, boolFalse = true, false

// pairs takes labels (sorted by key) from the slab; keep filters them.
func (s *slab) pairs(m map[string]string, keep func(string) bool) pairs {
	from := len(s.handles)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if keep == nil || keep(k) {
			s.handles = append(s.handles, unique.Make(pair{k, m[k]})) // unique.Make copies the strings
		}
	}
	if len(s.handles) == from {
		return nil
	}
	return pairs(s.handles[from:len(s.handles):len(s.handles)])
}

func (s *slab) time(t *metav1.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	s.times = append(s.times, *t)
	return &s.times[len(s.times)-1]
}

func (s *slab) ptr(v string) *string {
	s.ptrs = append(s.ptrs, v)
	return &s.ptrs[len(s.ptrs)-1]
}

// keptAnnotation says whether the planner reads an annotation: this controller's bookkeeping
// (hub-node-metadata.openshift.io/*) and nodelink's machine.openshift.io/machine. Real Nodes
// carry kilobytes of others' annotations (OVN, MCO, CSI) that would cost hub memory per spoke.
func keptAnnotation(k string) bool {
	return strings.HasPrefix(k, nmsync.KeyPrefix) || k == nmsync.AnnotationNodeMachine
}

func countKept(m map[string]string) int {
	n := 0
	for k := range m {
		if keptAnnotation(k) {
			n++
		}
	}
	return n
}
