package sync

import (
	"encoding/json"
	"sort"
	"strings"
	gosync "sync"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
)

// Kind says which metadata a Change is about.
type Kind string

const (
	// KindMachineLabel is a label in a Machine's own metadata.labels.
	KindMachineLabel Kind = "MachineLabel"
	// KindNodeLabel is a label on a Node, or in a Machine's
	// spec.metadata.labels (which nodelink copies onto the Node).
	KindNodeLabel Kind = "NodeLabel"
	// KindTaint is a taint in a Node's or a Machine's spec.taints.
	KindTaint Kind = "Taint"
)

// Op says what a Change does.
type Op string

const (
	// OpAdd sets a declared item that was absent.
	OpAdd Op = "Add"
	// OpUpdate changes the value of a declared item this controller owns.
	OpUpdate Op = "Update"
	// OpOverride replaces a foreign value of a declared key: the pool wins,
	// and the change is reported so that someone can notice the fight.
	OpOverride Op = "Override"
	// OpAdopt records a declared item that already has the wanted value.
	OpAdopt Op = "Adopt"
	// OpRemove deletes an owned item the pool no longer declares.
	OpRemove Op = "Remove"
	// OpRelease leaves in place an owned label the pool no longer declares
	// because someone else set it too (Change.With names them), and stops
	// recording it as owned.
	OpRelease Op = "Release"
	// OpDedupe deletes an extra copy of a declared taint (same key+effect).
	OpDedupe Op = "Dedupe"
	// OpReclaim deletes again an item this controller removed from a Node a
	// moment ago that came back with the value it removed: nodelink copying
	// it from a Machine it had not yet seen updated (Desired.Reclaim).
	OpReclaim Op = "Reclaim"
)

// Change is one decision of a Plan.
type Change struct {
	Kind Kind
	Op   Op
	// Key is a label key, or key:Effect for a taint.
	Key string
	// From is the observed value ("" for Add), To the value after the
	// patch ("" for Remove and Dedupe).
	From, To string
	// With names, for a Release, the other field managers that own the
	// item ("unknown" when none is named).
	With []string
	// Dropped marks a Remove of an item the MachineSet's template delivered
	// and the pool dropped before this controller recorded it (dropped.go).
	Dropped bool
}

// Plan is what it takes to bring one Machine or Node in line with a pool.
type Plan struct {
	// Changes lists the decisions, for logs, events and metrics. Changes are
	// never empty when Patch is set, except when only the bookkeeping
	// annotations need rewriting (say, a malformed or stale entry).
	Changes []Change
	// Patch is a JSON merge patch (RFC 7386) guarded by the observed
	// resourceVersion, or nil when the object is in sync.
	Patch []byte
	// NeedsRead is set when an owned label the pool no longer declares is
	// present and the object came without its managedFields (a trimmed
	// cache's copy): whether it is shared cannot be told. The plan keeps the
	// label and its record; read the object whole and plan again.
	NeedsRead bool
	// NeedsTemplate is set when an unrecorded item of a Machine is its
	// creator's alone and its MachineSet's template decides whether the pool
	// dropped it: plan again with Desired.Template (dropped.go).
	NeedsTemplate bool
	// Judged says a Machine had unrecorded items and every one was judged:
	// the caller may set Desired.Judged for the Machine at this version.
	Judged bool
}

// InSync reports whether the object needs no write.
func (p Plan) InSync() bool { return p.Patch == nil }

// PlanNode plans the labels and taints of one Node. It reads n and never
// modifies it; n must not be nil.
func PlanNode(d Desired, n *corev1.Node) Plan {
	// Copies of what the Machine's write removed are judged as recorded
	// items are (dropped.go).
	ownedLabels := copiesOf(parseOwnedLabels(n.Annotations[AnnotationOwnedLabels]), d.MachineRemoved.Labels, n.Labels)
	ownedTaints := copiesOf(parseOwnedTaints(n.Annotations[AnnotationOwnedTaints]), d.MachineRemoved.Taints, taintValues(n.Spec.Taints))
	labels := planLabels(KindNodeLabel, n.Labels, d.Labels, ownedLabels, d.Reclaim.Labels,
		gosync.OnceValue(func() labelEvidence { return nodeEvidence(n, d.MachineNodeLabels) }), pathLabels)
	taints := planTaints(n.Spec.Taints, d.Taints, ownedTaints, d.Deferred, d.Reclaim.Taints)

	annotations := map[string]any{}
	recordOwned(annotations, n.Annotations, AnnotationOwnedLabels, labels.record)
	recordOwned(annotations, n.Annotations, AnnotationOwnedTaints, taints.record)

	metadata := map[string]any{}
	putIfAny(metadata, "labels", labels.patch)
	putIfAny(metadata, "annotations", annotations)
	spec := map[string]any{}
	if taints.changed {
		spec["taints"] = taintsPatch(taints.list)
	}
	p := buildPlan(n.ResourceVersion, metadata, spec, labels.changes, taints.changes)
	p.NeedsRead = labels.needsRead
	return p
}

// PlanMachine plans one Machine: d.Labels in spec.metadata.labels, d.Taints
// in spec.taints and d.MachineLabels in metadata.labels. It reads m and never
// modifies it; m must not be nil.
func PlanMachine(d Desired, m *machinev1beta1.Machine) Plan {
	evidence := gosync.OnceValue(func() labelEvidence { return machineEvidence(m) })
	owned := dropped{machineLabels: parseOwnedLabels(m.Annotations[AnnotationOwnedMachineLabels]),
		nodeLabels: parseOwnedLabels(m.Annotations[AnnotationOwnedLabels]), taints: parseOwnedTaints(m.Annotations[AnnotationOwnedTaints])}
	// Items the template delivered and the pool dropped before they were
	// recorded go like recorded ones (dropped.go).
	dr, needsRead, needsTemplate, judged := droppedItems(d, m, owned, evidence)
	machineLabels := planLabels(KindMachineLabel, m.Labels, d.MachineLabels, withDropped(owned.machineLabels, dr.machineLabels), nil, evidence, pathLabels)
	nodeLabels := planLabels(KindNodeLabel, m.Spec.ObjectMeta.Labels, d.Labels, withDropped(owned.nodeLabels, dr.nodeLabels), nil, evidence, pathMachineNodeLabels)
	taints := planTaints(m.Spec.Taints, d.Taints, withDropped(owned.taints, dr.taints), d.Deferred, nil)
	markDropped(machineLabels.changes, dr.machineLabels)
	markDropped(nodeLabels.changes, dr.nodeLabels)
	markDropped(taints.changes, dr.taints)

	annotations := map[string]any{}
	recordOwned(annotations, m.Annotations, AnnotationOwnedMachineLabels, machineLabels.record)
	recordOwned(annotations, m.Annotations, AnnotationOwnedLabels, nodeLabels.record)
	recordOwned(annotations, m.Annotations, AnnotationOwnedTaints, taints.record)

	metadata := map[string]any{}
	putIfAny(metadata, "labels", machineLabels.patch)
	putIfAny(metadata, "annotations", annotations)
	spec := map[string]any{}
	if len(nodeLabels.patch) > 0 {
		spec["metadata"] = map[string]any{"labels": nodeLabels.patch}
	}
	if taints.changed {
		spec["taints"] = taintsPatch(taints.list)
	}
	p := buildPlan(m.ResourceVersion, metadata, spec, machineLabels.changes, nodeLabels.changes, taints.changes)
	p.NeedsRead = machineLabels.needsRead || nodeLabels.needsRead || needsRead
	p.NeedsTemplate = needsTemplate
	p.Judged = judged
	return p
}

type labelPlan struct {
	changes   []Change
	patch     map[string]any // key -> new value, or nil to delete
	record    []string       // owned keys after the patch, sorted
	needsRead bool           // a removal waits for the object's managedFields
}

// planLabels plans a label map. An owned label the pool no longer declares
// is removed only if evidence (the object's, read once and only when needed;
// the map is at prefix in it) says no one else set it; otherwise it is
// released: kept, and no longer recorded. A
// reclaim entry removes a label that is neither declared nor owned if it
// holds exactly the reclaimed value.
func planLabels(kind Kind, observed, declared map[string]string, owned map[string]bool, reclaim map[string]string, evidence func() labelEvidence, prefix []any) labelPlan {
	p := labelPlan{patch: map[string]any{}, record: sortedKeys(declared)}
	for _, k := range p.record {
		want := declared[k]
		have, present := observed[k]
		op := opFor(present, have == want, owned[k])
		if op == "" {
			continue
		}
		p.changes = append(p.changes, Change{Kind: kind, Op: op, Key: k, From: have, To: want})
		if op != OpAdopt {
			p.patch[k] = want
		}
	}
	for _, k := range sortedSet(owned) {
		if _, isDeclared := declared[k]; isDeclared {
			continue
		}
		have, present := observed[k]
		if !present {
			continue
		}
		ev := evidence()
		if !ev.read {
			p.needsRead = true
			p.record = append(p.record, k) // undecided: ownership stays as recorded
			continue
		}
		if with := ev.sharedWith(prefix, k); len(with) > 0 {
			p.changes = append(p.changes, Change{Kind: kind, Op: OpRelease, Key: k, From: have, To: have, With: with})
			continue
		}
		p.changes = append(p.changes, Change{Kind: kind, Op: OpRemove, Key: k, From: have})
		p.patch[k] = nil
	}
	sort.Strings(p.record)
	for _, k := range sortedKeys(reclaim) {
		_, isDeclared := declared[k]
		if have, present := observed[k]; present && !isDeclared && !owned[k] && have == reclaim[k] {
			p.changes = append(p.changes, Change{Kind: kind, Op: OpReclaim, Key: k, From: have})
			p.patch[k] = nil
		}
	}
	return p
}

type taintPlan struct {
	changes []Change
	list    []corev1.Taint // the whole new list
	changed bool           // list differs from the observed one
	record  []string       // owned key:Effect after the patch, sorted
}

// planTaints plans a taint list. A deferred ID is left as observed: not
// added, not changed, not removed, and recorded as owned only if it was. A
// reclaim entry (key:Effect -> value) removes a taint that is neither
// declared nor owned if it holds exactly the reclaimed value.
func planTaints(observed, declared []corev1.Taint, owned, deferred map[string]bool, reclaim map[string]string) taintPlan {
	var p taintPlan
	// Dedupe what is declared (first value wins); DesiredFromPool already
	// does, this keeps hand-built Desired values safe too.
	want := map[string]corev1.Taint{}
	var order []string
	for _, t := range declared {
		id := taintID(t)
		if _, dup := want[id]; !dup {
			want[id] = corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}
			order = append(order, id)
		}
	}
	seen := map[string]bool{}
	for _, t := range observed {
		id := taintID(t)
		w, isDeclared := want[id]
		switch {
		case isDeclared && deferred[id]:
			seen[id] = true // every observed copy is kept as it is
		case isDeclared && seen[id]:
			p.changes = append(p.changes, Change{Kind: KindTaint, Op: OpDedupe, Key: id, From: t.Value})
			p.changed = true
			continue
		case isDeclared:
			seen[id] = true
			if op := opFor(true, t.Value == w.Value, owned[id]); op != "" {
				p.changes = append(p.changes, Change{Kind: KindTaint, Op: op, Key: id, From: t.Value, To: w.Value})
			}
			if t.Value != w.Value {
				t.Value = w.Value // t is a copy; other fields (TimeAdded) stay
				p.changed = true
			}
		case owned[id]:
			p.changes = append(p.changes, Change{Kind: KindTaint, Op: OpRemove, Key: id, From: t.Value})
			p.changed = true
			continue
		case reclaimable(reclaim, id, t.Value):
			p.changes = append(p.changes, Change{Kind: KindTaint, Op: OpReclaim, Key: id, From: t.Value})
			p.changed = true
			continue
		}
		p.list = append(p.list, t)
	}
	for _, id := range order {
		if !seen[id] && !deferred[id] {
			w := want[id]
			p.changes = append(p.changes, Change{Kind: KindTaint, Op: OpAdd, Key: id, To: w.Value})
			p.list = append(p.list, w)
			p.changed = true
		}
	}
	for _, id := range order {
		if !deferred[id] || owned[id] {
			p.record = append(p.record, id)
		}
	}
	sort.Strings(p.record)
	return p
}

func reclaimable(reclaim map[string]string, id, value string) bool {
	v, ok := reclaim[id]
	return ok && v == value
}

// opFor says what a declared item needs, given whether the object has it,
// whether its value is the wanted one, and whether we own it; "" is nothing.
func opFor(present, sameValue, owned bool) Op {
	switch {
	case !present:
		return OpAdd
	case sameValue && owned:
		return ""
	case sameValue:
		return OpAdopt
	case owned:
		return OpUpdate
	default:
		return OpOverride
	}
}

func taintID(t corev1.Taint) string { return t.Key + taintEffectSeparator + string(t.Effect) }

// parseOwnedLabels reads an owned-labels annotation. Entries that are not
// valid label keys, or that are reserved keys, are ignored: they are never
// treated as owned, so a damaged annotation cannot make us delete them.
func parseOwnedLabels(s string) map[string]bool {
	owned := map[string]bool{}
	for _, e := range strings.Split(s, ownedSeparator) {
		e = strings.TrimSpace(e)
		if e == "" || len(content.IsLabelKey(e)) > 0 {
			continue
		}
		if r, _ := reservedKey(e, false); r {
			continue
		}
		owned[e] = true
	}
	return owned
}

// parseOwnedTaints reads an owned-taints annotation of key:Effect entries,
// with the same tolerance as parseOwnedLabels.
func parseOwnedTaints(s string) map[string]bool {
	owned := map[string]bool{}
	for _, e := range strings.Split(s, ownedSeparator) {
		e = strings.TrimSpace(e)
		i := strings.LastIndex(e, taintEffectSeparator)
		if i <= 0 {
			continue
		}
		key, effect := e[:i], corev1.TaintEffect(e[i+1:])
		if !validEffects[effect] || len(content.IsLabelKey(key)) > 0 {
			continue
		}
		if r, _ := reservedKey(key, true); r {
			continue
		}
		owned[e] = true
	}
	return owned
}

// recordOwned puts into patch the owned-* annotation key holding record, if
// it differs from what is observed; an empty record removes the annotation.
func recordOwned(patch map[string]any, observed map[string]string, key string, record []string) {
	have, present := observed[key]
	want := strings.Join(record, ownedSeparator)
	switch {
	case want == "" && present:
		patch[key] = nil
	case want != "" && (!present || have != want):
		patch[key] = want
	}
}

func taintsPatch(list []corev1.Taint) any {
	if len(list) == 0 {
		return nil // deletes spec.taints
	}
	return list
}

func putIfAny(m map[string]any, key string, v map[string]any) {
	if len(v) > 0 {
		m[key] = v
	}
}

func buildPlan(resourceVersion string, metadata, spec map[string]any, changes ...[]Change) Plan {
	var p Plan
	for _, c := range changes {
		p.Changes = append(p.Changes, c...)
	}
	if len(metadata) == 0 && len(spec) == 0 {
		return p
	}
	metadata["resourceVersion"] = resourceVersion
	patch := map[string]any{"metadata": metadata}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	b, err := json.Marshal(patch) // maps of strings and Taints: cannot fail
	if err != nil {
		panic("sync: marshal merge patch: " + err.Error())
	}
	p.Patch = b
	return p
}

func sortedSet(s map[string]bool) []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
