package sync

import (
	"maps"
	"slices"
	"strings"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Items the template delivered and the pool dropped before they were
// recorded.
//
// A Machine created from its MachineSet's template holds the pool's items as
// they stood then. This package records them when it first plans the
// Machine (adopted: present with the wanted value). If the pool drops one
// before that (the Machine was created while no replica led, or while the
// spoke was out of reach), the record never names it. Such an item goes
// like a recorded one (OpRemove, Change.Dropped) when it is neither
// declared, recorded nor reserved, and three things show it was the pool's:
//
//   - the pool dropped it, with that value, after the Machine was made:
//     Desired.Dropped, which the caller keeps in the pool's status from what
//     it saw the pool declare (NextDropped). Nothing else is a candidate, so
//     what an admin put in a template and took out again stays;
//   - the Machine's managedFields say its creator wrote it and no one else
//     has since: the label key, or the whole taint list (an atomic field,
//     so the first write of the list by anyone else, this controller too,
//     ends it), is owned by the one manager of the Machine's controller
//     ownerReference alone, and not by a server-side apply (a manifest
//     applied with that ownerReference in it);
//   - its MachineSet's template no longer holds it (key, or key:Effect), so
//     what the installer keeps in the template (an edge pool's node-role
//     label and taint), even with a value the pool once declared, stays.
//
// The Node got those items from nodelink. The Machine's removals, of these
// and of recorded items alike, go to its Node's plan (Desired.MachineRemoved):
// an unrecorded copy with the same value is judged as a recorded item is (a
// label someone other than nodelink and this controller owns too stays,
// released; a taint goes). That also covers a Node that registered, and got
// nodelink's copy, while its Machine held an item the pool then dropped.
//
// The cost: nothing while the pool has dropped nothing in DroppedTTL. A
// Machine with a candidate is read whole (Plan.NeedsRead), and its
// MachineSet read (Plan.NeedsTemplate) if the creator alone owns one; a
// template that cannot be read leaves the items for the next sync.
// Desired.Judged lets the caller skip a Machine already judged at its
// version (its candidates were someone else's, or the template still held
// them), so a label set by hand on a Machine costs one read, not one a sync.

// DroppedTTL is how long an item the pool dropped is remembered
// (Desired.Dropped), and maxDropped how many at most: the newest are kept.
const (
	DroppedTTL = 7 * 24 * time.Hour
	maxDropped = 250
)

// Items names every item d declares, sorted: label/<key>=<value>,
// machineLabel/<key>=<value>, taint/<key>:<effect>=<value>.
func (d Desired) Items() []string {
	out := make([]string, 0, len(d.Labels)+len(d.MachineLabels)+len(d.Taints))
	for k, v := range d.Labels {
		out = append(out, itemName(KindNodeLabel, k, v))
	}
	for k, v := range d.MachineLabels {
		out = append(out, itemName(KindMachineLabel, k, v))
	}
	for _, t := range d.Taints {
		out = append(out, itemName(KindTaint, taintID(t), t.Value))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// itemName is how Items names one item; key is key:Effect for a taint.
func itemName(kind Kind, key, value string) string {
	prefix := map[Kind]string{KindNodeLabel: "label/", KindMachineLabel: "machineLabel/", KindTaint: "taint/"}[kind]
	return prefix + key + "=" + value
}

// NextDropped is what the pool has dropped, as of now: what it dropped
// before (dropped, item -> when first seen gone) and what it declared last
// (declared, as Items names them) that d no longer declares, seen gone now.
// Items older than DroppedTTL, or declared again, leave; of more than
// maxDropped, the newest stay.
func NextDropped(declared []string, dropped map[string]time.Time, d Desired, now time.Time) map[string]time.Time {
	current := d.Items()
	out := map[string]time.Time{}
	for item, at := range dropped {
		if now.Sub(at) < DroppedTTL {
			out[item] = at
		}
	}
	for _, item := range declared {
		if _, seen := out[item]; !seen {
			out[item] = now
		}
	}
	for _, item := range current {
		delete(out, item)
	}
	if len(out) > maxDropped {
		items := slices.SortedFunc(maps.Keys(out), func(a, b string) int {
			if c := out[b].Compare(out[a]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		for _, item := range items[maxDropped:] {
			delete(out, item)
		}
	}
	return out
}

// Template is what a MachineSet's template holds, in the three places the
// pool's items go. A nil map or list holds nothing.
type Template struct {
	MachineLabels map[string]string // spec.template.metadata.labels
	Labels        map[string]string // spec.template.spec.metadata.labels
	Taints        []corev1.Taint    // spec.template.spec.taints
}

// TemplateOf is ms's Template.
func TemplateOf(ms *machinev1beta1.MachineSet) *Template {
	return &Template{
		MachineLabels: ms.Spec.Template.Labels,
		Labels:        ms.Spec.Template.Spec.ObjectMeta.Labels,
		Taints:        ms.Spec.Template.Spec.Taints,
	}
}

// dropped names a Machine's items in each place: label keys of metadata.labels
// and of spec.metadata.labels, and taint IDs.
type dropped struct {
	machineLabels, nodeLabels, taints map[string]bool
}

func (d dropped) empty() bool {
	return len(d.machineLabels)+len(d.nodeLabels)+len(d.taints) == 0
}

var pathTaints = fieldpath.MakePathOrDie("spec", "taints")

// droppedItems judges m's candidates. It returns the items that go, and
// what the judgement still needs: the Machine whole (managedFields), or its
// template. judged is true when there were candidates and every one was
// judged.
func droppedItems(d Desired, m *machinev1beta1.Machine, owned dropped, evidence func() labelEvidence) (out dropped, needsRead, needsTemplate, judged bool) {
	out = dropped{machineLabels: map[string]bool{}, nodeLabels: map[string]bool{}, taints: map[string]bool{}}
	if d.Judged {
		return out, false, false, false
	}
	if len(d.Dropped) == 0 {
		return out, false, false, false
	}
	made := m.CreationTimestamp.Time
	cands := dropped{
		machineLabels: labelCandidates(KindMachineLabel, m.Labels, d.MachineLabels, owned.machineLabels, d.Dropped, made),
		nodeLabels:    labelCandidates(KindNodeLabel, m.Spec.ObjectMeta.Labels, d.Labels, owned.nodeLabels, d.Dropped, made),
		taints:        taintCandidates(m.Spec.Taints, d.Taints, owned.taints, d.Dropped, made),
	}
	if cands.empty() {
		return out, false, false, false
	}
	ev := evidence()
	if !ev.read {
		return out, true, false, false
	}
	// What the creator alone still owns.
	creator := dropped{machineLabels: map[string]bool{}, nodeLabels: map[string]bool{}, taints: map[string]bool{}}
	for k := range cands.machineLabels {
		creator.machineLabels[k] = ev.creatorOnly(fieldpath.MakePathOrDie(append(slices.Clone(pathLabels), k)...))
	}
	for k := range cands.nodeLabels {
		creator.nodeLabels[k] = ev.creatorOnly(fieldpath.MakePathOrDie(append(slices.Clone(pathMachineNodeLabels), k)...))
	}
	if ev.creatorOnly(pathTaints) {
		maps.Copy(creator.taints, cands.taints)
	}
	maps.DeleteFunc(creator.machineLabels, func(_ string, v bool) bool { return !v })
	maps.DeleteFunc(creator.nodeLabels, func(_ string, v bool) bool { return !v })
	if creator.empty() {
		return out, false, false, true
	}
	if d.Template == nil {
		return out, false, true, false
	}
	for k := range creator.machineLabels {
		if _, held := d.Template.MachineLabels[k]; !held {
			out.machineLabels[k] = true
		}
	}
	for k := range creator.nodeLabels {
		if _, held := d.Template.Labels[k]; !held {
			out.nodeLabels[k] = true
		}
	}
	for id := range creator.taints {
		if !slices.ContainsFunc(d.Template.Taints, func(t corev1.Taint) bool { return taintID(t) == id }) {
			out.taints[id] = true
		}
	}
	return out, false, false, true
}

// droppedAfter reports whether the pool dropped item, with its value, at or
// after made (the Machine's creation): the template could have delivered it.
func droppedAfter(dropped map[string]time.Time, item string, made time.Time) bool {
	at, ok := dropped[item]
	return ok && !made.After(at)
}

// labelCandidates are the keys of observed that are neither declared nor
// owned, valid and not reserved, and that the pool dropped, with the value
// observed, since the Machine was made.
func labelCandidates(kind Kind, observed, declared map[string]string, owned map[string]bool, drops map[string]time.Time, made time.Time) map[string]bool {
	out := map[string]bool{}
	for k, v := range observed {
		if _, isDeclared := declared[k]; isDeclared || owned[k] || !droppedAfter(drops, itemName(kind, k, v), made) || len(content.IsLabelKey(k)) > 0 {
			continue
		}
		if r, _ := reservedKey(k, false); r {
			continue
		}
		out[k] = true
	}
	return out
}

// taintCandidates are the IDs of observed taints that are neither declared
// nor owned, and not reserved, and that the pool dropped, with the value
// observed, since the Machine was made.
func taintCandidates(observed, declared []corev1.Taint, owned map[string]bool, drops map[string]time.Time, made time.Time) map[string]bool {
	out := map[string]bool{}
	for _, t := range observed {
		id := taintID(t)
		if owned[id] || !droppedAfter(drops, itemName(KindTaint, id, t.Value), made) ||
			slices.ContainsFunc(declared, func(w corev1.Taint) bool { return taintID(w) == id }) {
			continue
		}
		if r, _ := reservedKey(t.Key, true); r {
			continue
		}
		out[id] = true
	}
	return out
}

// creatorOnly reports whether path is owned by the Machine's creator (the
// one manager of its controller ownerReference) and by no one else, and not
// by a server-side apply (a manifest applied with the ownerReference in it is
// no template's delivery).
func (ev labelEvidence) creatorOnly(path fieldpath.Path) bool {
	if len(ev.creator) != 1 {
		return false
	}
	owned := false
	for _, s := range ev.sets {
		if !s.fields.Has(path) {
			continue
		}
		if !ev.creator[s.manager] || s.apply {
			return false
		}
		owned = true
	}
	return owned
}

// withDropped is owned with the dropped items added (a new map).
func withDropped(owned, more map[string]bool) map[string]bool {
	out := maps.Clone(owned)
	if out == nil {
		out = map[string]bool{}
	}
	maps.Copy(out, more)
	return out
}

// markDropped sets Change.Dropped on the removals of dropped items.
func markDropped(changes []Change, items map[string]bool) {
	for i := range changes {
		if changes[i].Op == OpRemove && items[changes[i].Key] {
			changes[i].Dropped = true
		}
	}
}

// removedFrom is what a Machine's write removed from the places nodelink
// copies from (spec.metadata.labels, spec.taints), with the values removed
// (Desired.MachineRemoved).
func removedFrom(changes []Change) Reclaim {
	out := Reclaim{Labels: map[string]string{}, Taints: map[string]string{}}
	for _, c := range changes {
		if c.Op != OpRemove {
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
	return withDropped(owned, more)
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
