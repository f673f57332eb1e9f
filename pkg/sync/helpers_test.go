package sync

import (
	"encoding/json"
	"testing"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// applyPatch returns a copy of obj with the merge patch applied, through JSON
// with the merge patch implementation kube-apiserver uses.
func applyPatch[T any](t testing.TB, obj *T, patch []byte) *T {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonpatch.MergePatch(raw, patch)
	if err != nil {
		t.Fatalf("merge patch: %v: %s", err, patch)
	}
	var result T
	if err := json.Unmarshal(out, &result); err != nil {
		t.Fatal(err)
	}
	return &result
}

var t0 = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Local())

func taint(key, value string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Value: value, Effect: effect}
}

func timedTaint(key, value string, effect corev1.TaintEffect) corev1.Taint {
	t := taint(key, value, effect)
	t.TimeAdded = &t0
	return t
}

const (
	noSchedule = corev1.TaintEffectNoSchedule
	preferNo   = corev1.TaintEffectPreferNoSchedule
	noExecute  = corev1.TaintEffectNoExecute
)

type nodeOpt func(*corev1.Node)

func newNode(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "7"}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func nodeLabels(kv ...string) nodeOpt {
	return func(n *corev1.Node) { n.Labels = pairs(kv...) }
}

func nodeAnnotations(kv ...string) nodeOpt {
	return func(n *corev1.Node) { n.Annotations = pairs(kv...) }
}

func nodeTaints(ts ...corev1.Taint) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = ts }
}

type machineOpt func(*machinev1beta1.Machine)

func newMachine(name string, opts ...machineOpt) *machinev1beta1.Machine {
	m := &machinev1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: MachineAPINamespace, ResourceVersion: "9"}}
	for _, o := range opts {
		o(m)
	}
	return m
}

func machineLabels(kv ...string) machineOpt {
	return func(m *machinev1beta1.Machine) { m.Labels = pairs(kv...) }
}

func machineNodeLabels(kv ...string) machineOpt {
	return func(m *machinev1beta1.Machine) { m.Spec.ObjectMeta.Labels = pairs(kv...) }
}

func machineAnnotations(kv ...string) machineOpt {
	return func(m *machinev1beta1.Machine) { m.Annotations = pairs(kv...) }
}

func machineTaints(ts ...corev1.Taint) machineOpt {
	return func(m *machinev1beta1.Machine) { m.Spec.Taints = ts }
}

func pairs(kv ...string) map[string]string {
	if len(kv)%2 != 0 {
		panic("odd key/value list")
	}
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// managed gives an object managedFields in which manager owns the label keys
// at prefix (pathLabels or pathMachineNodeLabels) and, with extra, other
// fields (say pathNodeMachine).
func managed(manager string, prefix []any, keys []string, extra ...fieldpath.Path) metav1.ManagedFieldsEntry {
	s := fieldpath.NewSet(extra...)
	for _, k := range keys {
		s.Insert(fieldpath.MakePathOrDie(append(append([]any{}, prefix...), k)...))
	}
	raw, err := s.ToJSON()
	if err != nil {
		panic(err)
	}
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(raw))}
}

// nodeManaged sets a Node's managedFields.
func nodeManaged(entries ...metav1.ManagedFieldsEntry) nodeOpt {
	return func(n *corev1.Node) { n.ManagedFields = append([]metav1.ManagedFieldsEntry{}, entries...) }
}

// machineManaged sets a Machine's managedFields.
func machineManaged(entries ...metav1.ManagedFieldsEntry) machineOpt {
	return func(m *machinev1beta1.Machine) { m.ManagedFields = append([]metav1.ManagedFieldsEntry{}, entries...) }
}

// ours is an entry in which this controller owns the label keys at prefix.
func ours(prefix []any, keys ...string) metav1.ManagedFieldsEntry {
	return managed(FieldManager, prefix, keys)
}
