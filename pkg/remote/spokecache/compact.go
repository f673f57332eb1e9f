package spokecache

import (
	"fmt"
	"slices"
	"strings"
	"unique"
	"unsafe"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// compact keeps what label and taint reconciliation needs, so a spoke with thousands of Nodes
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
func compact(obj any) (*record, error) {
	switch o := obj.(type) {
	case *digestedNode:
		r, err := compact(o.Node)
		if err == nil {
			r.digest = o.digest
		}
		return r, err
	case *corev1.Node:
		r := compactMeta(&o.ObjectMeta, true, o.Spec.ProviderID)
		r.taints = internTaints(o.Spec.Taints)
		r.health = healthOf(o)
		return r, nil
	case *machinev1beta1.Machine:
		r := compactMeta(&o.ObjectMeta, true, ptr.Deref(o.Spec.ProviderID, "")) // nil and "" mean the same to the planner
		r.taints = internTaints(o.Spec.Taints)
		mf := &machineFields{nodeLabels: pairsOf(o.Spec.ObjectMeta.Labels, nil, o.Name)}
		if len(o.OwnerReferences) > 0 {
			mf.owners = make([]metav1.OwnerReference, len(o.OwnerReferences))
			for i, ref := range o.OwnerReferences {
				mf.owners[i] = metav1.OwnerReference{
					APIVersion: intern(ref.APIVersion), Kind: intern(ref.Kind), Name: intern(ref.Name), UID: interned(ref.UID),
					Controller: sharedBool(ref.Controller), BlockOwnerDeletion: sharedBool(ref.BlockOwnerDeletion),
				}
			}
		}
		if o.Status.NodeRef != nil {
			mf.nodeName = o.Status.NodeRef.Name
		}
		if o.Status.Phase != nil {
			mf.phase, mf.hasPhase = intern(*o.Status.Phase), true
		}
		r.machine = mf
		return r, nil
	case *machinev1beta1.MachineSet: // kept as its metadata is (the cache watches only that)
		return compactMeta(&o.ObjectMeta, false, ""), nil
	case *metav1.PartialObjectMetadata: // a MachineSet's metadata
		return compactMeta(&o.ObjectMeta, false, ""), nil
	}
	return nil, fmt.Errorf("unexpected %T in the spoke cache", obj)
}

// compactAll compacts a list's items.
func compactAll(objs []any) ([]*record, error) {
	recs := make([]*record, len(objs))
	for i, obj := range objs {
		r, err := compact(obj)
		if err != nil {
			return nil, err
		}
		recs[i] = r
	}
	return recs, nil
}

// compactMeta keeps the metadata every kind's record has, and providerID; annotations only
// when asked (the planner reads none of a MachineSet's).
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
