package spokecache

import (
	"iter"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"unique"
	"unsafe"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

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
	// digest is a Node's only: the nodeDigest of the message it was made from (0: none), by
	// which a heartbeat is recognised without being decoded (kindStore.Refresh). Set before
	// the record is published; then only the store reads and writes it, under its lock.
	digest uint64
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

// canonicalVersion is rv as a number when it is a canonical decimal other than 0 (etcd's always
// are), which a record keeps in rv.
func canonicalVersion(rv string) (uint64, bool) {
	v, err := strconv.ParseUint(rv, 10, 64)
	return v, err == nil && v != 0 && strconv.FormatUint(v, 10) == rv
}

// setIdentity sets id and rv. id is allocated at its exact size: a string made from a byte
// slice keeps the slice's whole capacity.
func (r *record) setIdentity(name, uid, rv, providerID string) {
	fields := [...]string{name, uid, providerID, rv}
	n := len(fields) // the resourceVersion is kept in id as it came, unless it is a number
	r.rv.Store(0)
	if v, ok := canonicalVersion(rv); ok {
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
		TypeMeta:   metav1.TypeMeta{APIVersion: GVKNode.GroupVersion().String(), Kind: GVKNode.Kind},
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
		TypeMeta:   metav1.TypeMeta{APIVersion: GVKMachine.GroupVersion().String(), Kind: GVKMachine.Kind},
		ObjectMeta: r.meta(nmsync.MachineAPINamespace),
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
		m.Status.NodeRef = &corev1.ObjectReference{Kind: GVKNode.Kind, Name: mf.nodeName}
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
		TypeMeta:   metav1.TypeMeta{APIVersion: GVKMachineSet.GroupVersion().String(), Kind: GVKMachineSet.Kind},
		ObjectMeta: r.meta(nmsync.MachineAPINamespace),
	}
}

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
