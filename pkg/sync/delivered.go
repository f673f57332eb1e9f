package sync

import (
	"maps"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Items the template delivered that were never recorded.
//
// A Machine created from its MachineSet's template holds the pool's items as
// they stood then. This controller records them when it first plans the
// Machine (adopted: present with the wanted value). If the pool drops one
// before that (the Machine was created while no replica led, or while the
// spoke was out of reach), the record never names it, and the record's rule
// alone would leave it for good. The Machine's managedFields tell: a label
// key that only the pool's delivery paths own (the creator, this
// controller), or a taint list only they own (spec.taints is one atomic
// field), was written by the template and by no one since, so it is the
// pool's, and goes like a recorded one (OpRemove, with Change.Delivered).
// Reserved keys are never candidates: the template's machine-api labels stay.
//
// Its Node got those items from nodelink, which copied them from the
// Machine; nothing on the Node tells them from someone else's. So the
// Machine's removals are handed to its Node's plan (Desired.MachineRemoved),
// whose copies with the same value are judged as recorded ones are: a label
// only nodelink or this controller owns goes, one someone else owns too is
// kept (OpRelease); a taint goes.
//
// The cost: a Machine holding an undeclared, unrecorded, unreserved item is
// read whole (Plan.NeedsRead) each time it is planned, since a trimmed cache
// drops managedFields. Machines rarely hold such items (machine-api's labels
// are reserved); a pool change costs nothing more.

// delivered names a Machine's undeclared, unrecorded items that its
// MachineSet's template delivered: keys of metadata.labels and of
// spec.metadata.labels, and taint IDs.
type delivered struct {
	machineLabels, nodeLabels, taints map[string]bool
}

var pathTaints = fieldpath.MakePathOrDie("spec", "taints")

// deliveredItems finds m's delivered items. It reads the evidence only when
// there is a candidate; without managedFields it names none and says the
// Machine must be read whole.
func deliveredItems(d Desired, m *machinev1beta1.Machine, owned delivered, evidence func() labelEvidence) (delivered, bool) {
	out := delivered{machineLabels: map[string]bool{}, nodeLabels: map[string]bool{}, taints: map[string]bool{}}
	machineLabels := labelCandidates(m.Labels, d.MachineLabels, owned.machineLabels)
	nodeLabels := labelCandidates(m.Spec.ObjectMeta.Labels, d.Labels, owned.nodeLabels)
	taints := taintCandidates(m.Spec.Taints, d.Taints, owned.taints)
	if len(machineLabels)+len(nodeLabels)+len(taints) == 0 {
		return out, false
	}
	ev := evidence()
	if !ev.read {
		return out, true
	}
	for _, c := range []struct {
		keys   []string
		prefix []any
		into   map[string]bool
	}{{machineLabels, pathLabels, out.machineLabels}, {nodeLabels, pathMachineNodeLabels, out.nodeLabels}} {
		for _, k := range c.keys {
			if len(ev.sharedWith(c.prefix, k)) == 0 {
				c.into[k] = true
			}
		}
	}
	if ev.deliveredOnly(pathTaints) {
		for _, id := range taints {
			out.taints[id] = true
		}
	}
	return out, false
}

// labelCandidates are the keys of observed that are neither declared nor
// owned, valid and not reserved.
func labelCandidates(observed, declared map[string]string, owned map[string]bool) []string {
	var out []string
	for _, k := range sortedKeys(observed) {
		if _, isDeclared := declared[k]; isDeclared || owned[k] || len(content.IsLabelKey(k)) > 0 {
			continue
		}
		if r, _ := reservedKey(k, false); r {
			continue
		}
		out = append(out, k)
	}
	return out
}

// taintCandidates are the IDs of observed taints that are neither declared
// nor owned, and not reserved.
func taintCandidates(observed, declared []corev1.Taint, owned map[string]bool) []string {
	want := map[string]bool{}
	for _, t := range declared {
		want[taintID(t)] = true
	}
	var out []string
	for _, t := range observed {
		id := taintID(t)
		if want[id] || owned[id] {
			continue
		}
		if r, _ := reservedKey(t.Key, true); r {
			continue
		}
		out = append(out, id)
	}
	return out
}

// deliveredOnly reports whether path is owned, and only by the pool's
// delivery paths.
func (ev labelEvidence) deliveredOnly(path fieldpath.Path) bool {
	owned := false
	for _, s := range ev.sets {
		if !s.fields.Has(path) {
			continue
		}
		if !ev.delivery[s.manager] {
			return false
		}
		owned = true
	}
	return owned
}

// union is owned with the delivered keys added (a new map).
func union(owned, more map[string]bool) map[string]bool {
	out := maps.Clone(owned)
	if out == nil {
		out = map[string]bool{}
	}
	maps.Copy(out, more)
	return out
}

// markDelivered sets Change.Delivered on the removals of delivered items.
func markDelivered(changes []Change, kind Kind, items map[string]bool) {
	for i := range changes {
		if changes[i].Kind == kind && changes[i].Op == OpRemove && items[changes[i].Key] {
			changes[i].Delivered = true
		}
	}
}

// removedFrom is what a Machine's write removed from the places nodelink
// copies from (spec.metadata.labels, spec.taints), with the values removed:
// its Node's plan judges its copies of them as recorded ones
// (Desired.MachineRemoved).
func removedFrom(changes []Change) Reclaim {
	out := Reclaim{Labels: map[string]string{}, Taints: map[string]string{}}
	for _, c := range changes {
		if c.Op != OpRemove || !c.Delivered {
			continue
		}
		switch c.Kind {
		case KindNodeLabel:
			out.Labels[c.Key] = c.From
		case KindTaint:
			out.Taints[c.Key] = c.From
		}
	}
	return out
}

// copiesOf is owned with the items of removed that observed holds with the
// same value added (a new map).
func copiesOf(owned map[string]bool, removed, observed map[string]string) map[string]bool {
	more := map[string]bool{}
	for k, v := range removed {
		if have, ok := observed[k]; ok && have == v {
			more[k] = true
		}
	}
	return union(owned, more)
}

// taintValues is a taint list as ID -> value (the first of duplicates).
func taintValues(ts []corev1.Taint) map[string]string {
	out := map[string]string{}
	for _, t := range ts {
		if _, dup := out[taintID(t)]; !dup {
			out[taintID(t)] = t.Value
		}
	}
	return out
}
