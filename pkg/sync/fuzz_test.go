package sync

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Small alphabets, so that fuzzed declared, observed and owned items collide.
var (
	fuzzLabelKeys = []string{"a", "b", "example.com/c", infra, "kubernetes.io/hostname"}
	fuzzValues    = []string{"", "1", "2"}
	fuzzTaintKeys = []string{"a", "gpu", infra, "node.kubernetes.io/unschedulable"}
	fuzzEffects   = []corev1.TaintEffect{noSchedule, preferNo, noExecute}
)

// fuzzItems decodes byte pairs into labels for places-1 label maps and one
// taint list (place 0 is the taints). Pair (b0, b1): place = b0 % places,
// key = b0 / places; value = b1 % 3, effect = b1/3 % 3, TimeAdded if b1/9 is odd.
func fuzzItems(data []byte, places int) ([]map[string]string, []corev1.Taint) {
	labels := make([]map[string]string, places-1)
	var taints []corev1.Taint
	for i := 0; i+1 < len(data); i += 2 {
		b0, b1 := int(data[i]), int(data[i+1])
		place, key := b0%places, b0/places
		value := fuzzValues[b1%len(fuzzValues)]
		if place == 0 {
			t := taint(fuzzTaintKeys[key%len(fuzzTaintKeys)], value, fuzzEffects[b1/3%len(fuzzEffects)])
			if b1/9%2 == 1 {
				t.TimeAdded = &t0
			}
			taints = append(taints, t)
			continue
		}
		if labels[place-1] == nil {
			labels[place-1] = map[string]string{}
		}
		labels[place-1][fuzzLabelKeys[key%len(fuzzLabelKeys)]] = value
	}
	return labels, taints
}

// fuzzOwned builds owned-* annotations from owned (decoded like fuzzItems)
// with junk appended, so that the tolerant parser is fuzzed too.
func fuzzOwned(owned []byte, junk string, labelAnnotations []string) map[string]string {
	if len(owned) == 0 && junk == "" {
		return nil
	}
	labels, taints := fuzzItems(owned, len(labelAnnotations)+1)
	ann := map[string]string{"other.example.com/keep": "me"}
	var ids []string
	for _, t := range taints {
		ids = append(ids, taintID(t))
	}
	ann[AnnotationOwnedTaints] = strings.Join(append(ids, junk), ",")
	for i, key := range labelAnnotations {
		ann[key] = strings.Join(append(sortedKeys(labels[i]), junk), ",")
	}
	return ann
}

func fuzzSeeds(f *testing.F) {
	f.Add([]byte{}, []byte{}, []byte{}, "")
	f.Add([]byte{1, 1, 0, 2}, []byte{1, 2, 0, 11, 2, 0}, []byte{1, 0}, "")
	f.Add([]byte{0, 1, 0, 2, 4, 0}, []byte{0, 0, 2, 10, 0, 5, 0, 9}, []byte{0, 0, 6, 0}, "bad key!,x:Bogus")
	f.Add([]byte{3, 1}, []byte{3, 2, 5, 1, 8, 0}, []byte{3, 0, 5, 0, 9, 0}, " a , ,gpu:NoSchedule")
}

// Who owns a fuzzed object's labels, by (seed + the key's index in
// fuzzLabelKeys) % 4: this controller, the pool's other delivery path (the
// linker on a Node, the creator on a Machine), someone else, or no one.
const (
	fuzzByUs = iota
	fuzzByDelivery
	fuzzByOther
	fuzzByNoOne
)

func fuzzOwner(seed int, key string) int {
	for i, k := range fuzzLabelKeys {
		if k == key {
			return (seed + i) % 4
		}
	}
	return fuzzByNoOne
}

// fuzzManaged builds managedFields for labels at each prefix (by fuzzOwner),
// with delivery owning the extra paths that make it a delivery path; a seed
// of 6 modulo 7 gives none at all (nil), as a trimmed cache's copy has.
func fuzzManaged(seed int, delivery string, extra []fieldpath.Path, labels map[string][]any) []metav1.ManagedFieldsEntry {
	if seed%7 == 6 {
		return nil
	}
	sets := map[string]*fieldpath.Set{FieldManager: {}, delivery: fieldpath.NewSet(extra...), "kubelet": {}}
	for _, prefix := range labels {
		for _, k := range fuzzLabelKeys {
			p := fieldpath.MakePathOrDie(append(append([]any{}, prefix...), k)...)
			switch fuzzOwner(seed, k) {
			case fuzzByUs:
				sets[FieldManager].Insert(p)
			case fuzzByDelivery:
				sets[delivery].Insert(p)
			case fuzzByOther:
				sets["kubelet"].Insert(p)
			}
		}
	}
	out := []metav1.ManagedFieldsEntry{}
	for _, m := range []string{FieldManager, delivery, "kubelet"} {
		raw, err := sets[m].ToJSON()
		if err != nil {
			panic(err)
		}
		out = append(out, metav1.ManagedFieldsEntry{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(raw))})
	}
	return out
}

// fuzzRemovable says whether an owned label the pool dropped may go: only
// when the object was read whole and no one but the pool's delivery paths
// owns it.
func fuzzRemovable(seed int) func(string) bool {
	return func(k string) bool {
		o := fuzzOwner(seed, k)
		return seed%7 != 6 && (o == fuzzByUs || o == fuzzByDelivery)
	}
}

// checkLabels asserts invariant 1 for labels (items neither declared nor
// removable are unchanged) and invariant 3 (declared present, owned-undeclared
// removable ones gone).
func checkLabels(t *testing.T, what string, before, after, declared map[string]string, owned map[string]bool, removable func(string) bool) {
	t.Helper()
	for k, v := range before {
		if _, isDeclared := declared[k]; !isDeclared && (!owned[k] || !removable(k)) {
			if got, ok := after[k]; !ok || got != v {
				t.Errorf("%s: foreign or shared %s=%q became %q (present %v)", what, k, v, got, ok)
			}
		}
	}
	// Invariant 3: every declared label with its value, no owned-undeclared one.
	for k, v := range declared {
		if got, ok := after[k]; !ok || got != v {
			t.Errorf("%s: declared %s=%q is %q (present %v)", what, k, v, got, ok)
		}
	}
	for k := range owned {
		if _, isDeclared := declared[k]; !isDeclared && removable(k) {
			if _, ok := after[k]; ok {
				t.Errorf("%s: owned undeclared %s still present", what, k)
			}
		}
	}
}

func checkTaints(t *testing.T, before, after, declared []corev1.Taint, owned map[string]bool) {
	t.Helper()
	// Invariant 1: foreign taints keep their order, fields and duplicates.
	want := map[string]string{}
	for _, d := range declared {
		if _, dup := want[taintID(d)]; !dup {
			want[taintID(d)] = d.Value
		}
	}
	foreign := func(ts []corev1.Taint) []corev1.Taint {
		var out []corev1.Taint
		for _, x := range ts {
			if _, isDeclared := want[taintID(x)]; !isDeclared && !owned[taintID(x)] {
				out = append(out, x)
			}
		}
		return out
	}
	if diff := cmp.Diff(foreign(before), foreign(after)); diff != "" {
		t.Errorf("foreign taints changed (-before +after):\n%s", diff)
	}
	// Invariants 3 and 4: each declared taint exactly once, with its value,
	// keeping the fields of its first observed copy; no owned-undeclared one.
	count := map[string]int{}
	for _, x := range after {
		id := taintID(x)
		if v, isDeclared := want[id]; isDeclared {
			count[id]++
			if x.Value != v {
				t.Errorf("declared taint %s has value %q, want %q", id, x.Value, v)
			}
			for _, b := range before {
				if taintID(b) == id {
					if !cmp.Equal(b.TimeAdded, x.TimeAdded) {
						t.Errorf("declared taint %s lost its TimeAdded", id)
					}
					break
				}
			}
		} else if owned[id] {
			t.Errorf("owned undeclared taint %s still present", id)
		}
	}
	for id := range want {
		if count[id] != 1 {
			t.Errorf("declared taint %s present %d times", id, count[id])
		}
	}
}

func FuzzPlanNode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, declared, observed, owned []byte, junk string) {
		dl, dt := fuzzItems(declared, 2)
		d := Desired{Labels: dl[0], Taints: dt}
		ol, ot := fuzzItems(observed, 2)
		n := newNode("n", nodeTaints(ot...))
		n.Labels = ol[0]
		n.Annotations = fuzzOwned(owned, junk, []string{AnnotationOwnedLabels})
		n.ManagedFields = fuzzManaged(len(junk), "nodelink", []fieldpath.Path{pathNodeMachine}, map[string][]any{"labels": pathLabels})
		before := n.DeepCopy()

		p := PlanNode(d, n)
		if diff := cmp.Diff(before, n); diff != "" {
			t.Fatalf("PlanNode modified its input:\n%s", diff)
		}
		after := n
		if !p.InSync() {
			after = applyPatch(t, n, p.Patch)
		}
		if again := PlanNode(d, after); !again.InSync() {
			t.Errorf("not in sync after applying %s: %s", p.Patch, again.Patch)
		}
		checkLabels(t, "node label", n.Labels, after.Labels, d.Labels, parseOwnedLabels(n.Annotations[AnnotationOwnedLabels]), fuzzRemovable(len(junk)))
		checkTaints(t, n.Spec.Taints, after.Spec.Taints, d.Taints, parseOwnedTaints(n.Annotations[AnnotationOwnedTaints]))
		checkRest(t, n, after, func(x *corev1.Node) *corev1.Node {
			x = x.DeepCopy()
			x.Labels, x.Spec.Taints, x.Annotations = nil, nil, foreignAnnotations(x.Annotations)
			return x
		})
	})
}

func FuzzPlanMachine(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, declared, observed, owned []byte, junk string) {
		dl, dt := fuzzItems(declared, 3)
		d := Desired{Labels: dl[0], MachineLabels: dl[1], Taints: dt}
		ol, ot := fuzzItems(observed, 3)
		m := newMachine("m", machineTaints(ot...))
		m.Spec.ObjectMeta.Labels, m.Labels = ol[0], ol[1]
		m.Annotations = fuzzOwned(owned, junk, []string{AnnotationOwnedLabels, AnnotationOwnedMachineLabels})
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet", Name: "ms", UID: "ms-uid", Controller: ptr.To(true)}}
		m.ManagedFields = fuzzManaged(len(junk), "machineset-controller",
			[]fieldpath.Path{fieldpath.MakePathOrDie("metadata", "ownerReferences", fieldpath.KeyByFields("uid", "ms-uid"))},
			map[string][]any{"labels": pathLabels, "spec.metadata.labels": pathMachineNodeLabels})
		before := m.DeepCopy()

		p := PlanMachine(d, m)
		if diff := cmp.Diff(before, m); diff != "" {
			t.Fatalf("PlanMachine modified its input:\n%s", diff)
		}
		after := m
		if !p.InSync() {
			after = applyPatch(t, m, p.Patch)
		}
		if again := PlanMachine(d, after); !again.InSync() {
			t.Errorf("not in sync after applying %s: %s", p.Patch, again.Patch)
		}
		checkLabels(t, "spec.metadata label", m.Spec.ObjectMeta.Labels, after.Spec.ObjectMeta.Labels, d.Labels, parseOwnedLabels(m.Annotations[AnnotationOwnedLabels]), fuzzRemovable(len(junk)))
		checkLabels(t, "machine label", m.Labels, after.Labels, d.MachineLabels, parseOwnedLabels(m.Annotations[AnnotationOwnedMachineLabels]), fuzzRemovable(len(junk)))
		checkTaints(t, m.Spec.Taints, after.Spec.Taints, d.Taints, parseOwnedTaints(m.Annotations[AnnotationOwnedTaints]))
		checkRest(t, m, after, func(x *machinev1beta1.Machine) *machinev1beta1.Machine {
			x = x.DeepCopy()
			x.Labels, x.Spec.ObjectMeta.Labels, x.Spec.Taints = nil, nil, nil
			x.Annotations = foreignAnnotations(x.Annotations)
			return x
		})
	})
}

// checkRest asserts that nothing but the planned fields changed: both objects,
// normalized (labels, taints and owned-* annotations cleared), are equal.
func checkRest[T any](t *testing.T, before, after T, normalize func(T) T) {
	t.Helper()
	if diff := cmp.Diff(normalize(before), normalize(after)); diff != "" {
		t.Errorf("fields outside the plan changed (-before +after):\n%s", diff)
	}
}

// foreignAnnotations drops the owned-* annotations.
func foreignAnnotations(ann map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range ann {
		switch k {
		case AnnotationOwnedLabels, AnnotationOwnedTaints, AnnotationOwnedMachineLabels:
		default:
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
