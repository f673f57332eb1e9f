package spokecache

import (
	"fmt"
	"slices"
	"strings"
	"unique"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// compactAs compacts obj with compact, which takes the kind's type: an object of another type
// (in a watch of the kind) is refused.
func compactAs[T runtime.Object](obj runtime.Object, compact func(T) *record) (*record, error) {
	o, ok := obj.(T)
	if !ok {
		var want T
		return nil, fmt.Errorf("unexpected %T in a watch of %T", obj, want)
	}
	return compact(o), nil
}

// compactAll compacts a list's items.
func compactAll[T any](items []T, compact func(T) *record) []*record {
	recs := make([]*record, len(items))
	for i, item := range items {
		recs[i] = compact(item)
	}
	return recs
}

// compactMeta and each kind's compacter (compactNode, compactMachine, compactMachineSet) keep
// what label and taint reconciliation needs, so a spoke with thousands of Nodes
// costs little hub memory:
//
//   - Node: name, uid, resourceVersion, labels, the kept annotations, deletionTimestamp,
//     spec.taints, spec.providerID, and whether it is ready and schedulable (the rest of
//     status, images, other conditions... are dropped);
//   - Machine: the same plus ownerReferences, spec.metadata.labels, status.nodeRef's name and
//     status.phase (providerSpec and providerStatus are dropped);
//   - MachineSet: name, uid, resourceVersion, labels and deletionTimestamp.
//
// Consequence for callers: cached objects are not complete. Never Update from them; compute
// patches (merge patches from a cached base diff only the fields that exist in both) or read
// Live.
//
// compactMeta keeps what every kind has: name, uid, resourceVersion, labels, the kept
// annotations (with annotations), deletionTimestamp and providerID.
func compactMeta(m *metav1.ObjectMeta, annotations bool, providerID string) *record {
	r := &record{
		labels:   pairsOf(m.Labels, nil, m.Name),
		deletion: m.DeletionTimestamp.DeepCopy(),
	}
	r.setIdentity(m.Name, string(m.UID), m.ResourceVersion, providerID)
	if annotations {
		r.annotations = pairsOf(m.Annotations, keptAnnotation, m.Name)
	}
	return r
}

// pairsOf keeps m's entries that keep accepts (all with a nil keep), sorted by key: those that
// ownPair says are the object's own (name is the object's) packed into one string, the others
// interned. Both parts are made at their size, once: every list item and watch event is
// compacted.
func pairsOf(m map[string]string, keep func(string) bool, name string) pairs {
	keys := make([]string, 0, len(m))
	shared, ownSize := 0, 0
	for k, v := range m {
		if keep != nil && !keep(k) {
			continue
		}
		keys = append(keys, k)
		if ownPair(k, v, name) {
			ownSize += fieldSize(k) + fieldSize(v)
		} else {
			shared++
		}
	}
	slices.Sort(keys)
	var p pairs
	if shared > 0 {
		p.shared = make([]unique.Handle[pair], 0, shared)
	}
	var own []byte
	if ownSize > 0 {
		own = make([]byte, 0, ownSize)
	}
	for _, k := range keys {
		v := m[k]
		if ownPair(k, v, name) {
			own = appendField(appendField(own, k), v)
		} else {
			p.shared = append(p.shared, unique.Make(pair{k, v})) // unique.Make copies the strings
		}
	}
	if ownSize > 0 {
		p.own = unsafe.String(unsafe.SliceData(own), len(own)) // own is p's alone, and never written again
	}
	return p
}

// ownPair says whether a pair belongs to one object by construction, so that interning it
// would only add an entry to the unique map: kubelet's hostname label, nodelink's annotation
// naming the Node's Machine, and any pair whose value is the object's name.
func ownPair(key, value, name string) bool {
	return key == corev1.LabelHostname || key == nmsync.AnnotationNodeMachine || (value != "" && value == name)
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

// keptAnnotation says whether the planner reads an annotation: this controller's bookkeeping
// (hub-node-metadata.openshift.io/*) and nodelink's machine.openshift.io/machine. Real Nodes
// carry kilobytes of others' annotations (OVN, MCO, CSI) that would cost hub memory per spoke.
func keptAnnotation(k string) bool {
	return strings.HasPrefix(k, nmsync.KeyPrefix) || k == nmsync.AnnotationNodeMachine
}
