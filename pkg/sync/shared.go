package sync

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// labelEvidence says, for one object read with its metadata.managedFields,
// whether a label this controller recorded may be removed as delivered by the
// pool, or was also set by someone else (see "Shared items" in doc.go).
type labelEvidence struct {
	// read is false for an object without managedFields, as a trimmed cache
	// serves objects: nothing can be decided before the object is read whole.
	read bool
	// sets holds each managedFields entry's manager and fields.
	sets []managerSet
	// delivery names the managers that deliver the pool's items: this
	// controller and, on a Machine, its creator.
	delivery map[string]bool
	// linker names, on a Node, the managers that own nodelink's
	// machine.openshift.io/machine annotation: they deliver a label only
	// while the Machine no longer holds it (machineHolds), since nodelink
	// copies back whatever the Machine holds.
	linker       map[string]bool
	machineHolds map[string]string
	// creator names, on a Machine, the managers that own its controller
	// ownerReference: whoever made it from its MachineSet's template.
	creator map[string]bool
}

type managerSet struct {
	manager string
	fields  *fieldpath.Set
	apply   bool // a server-side apply entry
}

var (
	pathLabels            = []any{"metadata", "labels"}
	pathMachineNodeLabels = []any{"spec", "metadata", "labels"}
	pathNodeMachine       = fieldpath.MakePathOrDie("metadata", "annotations", AnnotationNodeMachine)
)

// newLabelEvidence reads obj's managedFields, once for all its label maps.
// An entry whose fields do not parse is skipped, so its manager can never
// make a label removable.
func newLabelEvidence(obj metav1.Object) labelEvidence {
	mf := obj.GetManagedFields()
	ev := labelEvidence{read: mf != nil, delivery: map[string]bool{FieldManager: true}, linker: map[string]bool{}}
	for _, e := range mf {
		if e.FieldsV1 == nil {
			continue
		}
		s := &fieldpath.Set{}
		if err := s.FromJSON(e.FieldsV1.GetRawReader()); err != nil {
			continue
		}
		ev.sets = append(ev.sets, managerSet{manager: e.Manager, fields: s, apply: e.Operation == metav1.ManagedFieldsOperationApply})
	}
	return ev
}

// machineEvidence is the evidence of a Machine's labels, in both its label
// maps: the manager that created it from its MachineSet's template (the
// owner of its controller ownerReference) delivers too.
func machineEvidence(obj metav1.Object) labelEvidence {
	ev := newLabelEvidence(obj)
	ev.creator = map[string]bool{}
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		ev.addOwners(ev.creator, fieldpath.MakePathOrDie("metadata", "ownerReferences", fieldpath.KeyByFields("uid", string(ref.UID))))
	}
	maps.Copy(ev.delivery, ev.creator)
	return ev
}

// nodeEvidence is the evidence of a Node's labels, given the node labels its
// Machine holds once its own write is done.
func nodeEvidence(obj metav1.Object, machineHolds map[string]string) labelEvidence {
	ev := newLabelEvidence(obj)
	ev.addOwners(ev.linker, pathNodeMachine)
	ev.machineHolds = machineHolds
	return ev
}

func (ev labelEvidence) addOwners(into map[string]bool, path fieldpath.Path) {
	for _, s := range ev.sets {
		if s.fields.Has(path) {
			into[s.manager] = true
		}
	}
}

// sharedWith returns the managers other than the pool's delivery paths that
// own label key of the map at prefix (pathLabels, pathMachineNodeLabels):
// none means it may be removed. A key no manager owns (an object older than
// managedFields) is shared with "unknown".
func (ev labelEvidence) sharedWith(prefix []any, key string) []string {
	p := fieldpath.MakePathOrDie(append(slices.Clone(prefix), key)...)
	_, held := ev.machineHolds[key]
	owned := false
	var others []string
	for _, s := range ev.sets {
		if !s.fields.Has(p) {
			continue
		}
		owned = true
		if !ev.delivery[s.manager] && (held || !ev.linker[s.manager]) {
			others = append(others, s.manager)
		}
	}
	if !owned {
		return []string{"unknown"}
	}
	slices.Sort(others)
	return slices.Compact(others)
}
