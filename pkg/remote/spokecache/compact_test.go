package spokecache

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

func TestCompact(t *testing.T) {
	now := metav1.Now()
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	phase := "Running"
	raw := &runtime.RawExtension{Raw: []byte(`{"instanceType":"m5.xlarge","userDataSecret":{"name":"x"}}`)}
	taints := []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}
	nodeRef := &corev1.ObjectReference{Kind: "Node", Name: "n1"}

	const owned, nodelink = "hub-node-metadata.openshift.io/owned-labels", "machine.openshift.io/machine"
	kept := map[string]string{owned: "x", nodelink: "ns/m1"}
	fullMeta := func(ns, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: "uid", ResourceVersion: "7", Generation: 3,
			Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "1", "k8s.ovn.org/node-subnets": "{...}", owned: "x", nodelink: "ns/m1"},
			DeletionTimestamp: &now, Finalizers: []string{"f"}, ManagedFields: managed,
			OwnerReferences: []metav1.OwnerReference{{Name: "o"}},
		}
	}
	tests := map[string]struct {
		in, want any
	}{
		"node": {
			in: &corev1.Node{
				TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
				ObjectMeta: fullMeta("", "n1"),
				Spec:       corev1.NodeSpec{Taints: taints, ProviderID: "aws:///i-1", PodCIDR: "10.0.0.0/24", Unschedulable: true},
				Status: corev1.NodeStatus{
					Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
					Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
					Images:     []corev1.ContainerImage{{Names: []string{"quay.io/x"}}},
				},
			},
			want: &corev1.Node{
				TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{
					Name: "n1", UID: "uid", ResourceVersion: "7",
					Labels: map[string]string{"l": "1"}, Annotations: kept, DeletionTimestamp: &now,
				},
				Spec: corev1.NodeSpec{Taints: taints, ProviderID: "aws:///i-1", Unschedulable: true},
			},
		},
		"node not ready": {
			in: &corev1.Node{
				ObjectMeta: fullMeta("", "n2"),
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
					{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue},
					{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"},
				}},
			},
			want: &corev1.Node{
				TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{
					Name: "n2", UID: "uid", ResourceVersion: "7",
					Labels: map[string]string{"l": "1"}, Annotations: kept, DeletionTimestamp: &now,
				},
				// What the health gate reads: Ready's status; the rest is dropped.
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}},
			},
		},
		"machine": {
			in: &machinev1beta1.Machine{
				ObjectMeta: fullMeta(nmsync.MachineAPINamespace, "m1"),
				Spec: machinev1beta1.MachineSpec{
					ObjectMeta:   machinev1beta1.ObjectMeta{Labels: map[string]string{"node": "label"}},
					Taints:       taints,
					ProviderSpec: machinev1beta1.ProviderSpec{Value: raw},
					ProviderID:   ptrTo("aws:///i-1"),
				},
				Status: machinev1beta1.MachineStatus{
					NodeRef: nodeRef, Phase: &phase, ProviderStatus: raw,
					Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
				},
			},
			want: &machinev1beta1.Machine{
				TypeMeta: metav1.TypeMeta{Kind: "Machine", APIVersion: "machine.openshift.io/v1beta1"},
				ObjectMeta: metav1.ObjectMeta{
					Namespace: nmsync.MachineAPINamespace, Name: "m1", UID: "uid", ResourceVersion: "7",
					Labels: map[string]string{"l": "1"}, Annotations: kept, DeletionTimestamp: &now,
					OwnerReferences: []metav1.OwnerReference{{Name: "o"}},
				},
				Spec: machinev1beta1.MachineSpec{
					ObjectMeta: machinev1beta1.ObjectMeta{Labels: map[string]string{"node": "label"}},
					Taints:     taints,
					ProviderID: ptrTo("aws:///i-1"),
				},
				Status: machinev1beta1.MachineStatus{NodeRef: nodeRef, Phase: &phase},
			},
		},
		"machineset": {
			in: &machinev1beta1.MachineSet{
				ObjectMeta: fullMeta(nmsync.MachineAPINamespace, "ms"),
				Spec: machinev1beta1.MachineSetSpec{Template: machinev1beta1.MachineTemplateSpec{
					Spec: machinev1beta1.MachineSpec{Taints: taints, ProviderSpec: machinev1beta1.ProviderSpec{Value: raw}},
				}},
				Status: machinev1beta1.MachineSetStatus{Replicas: 3},
			},
			want: &machinev1beta1.MachineSet{
				TypeMeta: metav1.TypeMeta{Kind: "MachineSet", APIVersion: "machine.openshift.io/v1beta1"},
				ObjectMeta: metav1.ObjectMeta{
					Namespace: nmsync.MachineAPINamespace, Name: "ms", UID: "uid", ResourceVersion: "7",
					Labels: map[string]string{"l": "1"}, DeletionTimestamp: &now,
				},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := compact(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got := expand(r, tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("compact then expand (-want +got):\n%s", diff)
			}
			r2, err := compact(got)
			if err != nil {
				t.Fatal(err)
			}
			if !r.sameContent(r2) || r.resourceVersion() != r2.resourceVersion() {
				t.Errorf("not idempotent: %+v then %+v", r, r2)
			}
		})
	}
}

// expand turns r back into an object of in's kind.
func expand(r *record, in any) any {
	switch in.(type) {
	case *corev1.Node:
		o := r.asNode()
		return &o
	case *machinev1beta1.Machine:
		o := r.asMachine()
		return &o
	default:
		o := r.asMachineSet()
		return &o
	}
}

func TestSameContent(t *testing.T) {
	node := func(rv string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: rv, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Reason: rv}}}}
	}
	tests := map[string]struct {
		old, new *corev1.Node
		want     bool
	}{
		"heartbeat (only rv and status differ)": {node("1", map[string]string{"a": "b"}), node("2", map[string]string{"a": "b"}), true},
		"label changed":                         {node("1", map[string]string{"a": "b"}), node("2", map[string]string{"a": "c"}), false},
		"label added":                           {node("1", nil), node("2", map[string]string{"a": ""}), false},
		"taint value changed": {node("1", nil, corev1.Taint{Key: "k", Value: "1", Effect: corev1.TaintEffectNoSchedule}),
			node("2", nil, corev1.Taint{Key: "k", Value: "2", Effect: corev1.TaintEffectNoSchedule}), false},
		"turned NotReady": {node("1", nil), func() *corev1.Node {
			n := node("2", nil)
			n.Status.Conditions[0].Status = corev1.ConditionFalse
			return n
		}(), false},
		"cordoned": {node("1", nil), func() *corev1.Node { n := node("2", nil); n.Spec.Unschedulable = true; return n }(), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, _ := compact(tc.old)
			b, _ := compact(tc.new)
			if got := a.sameContent(b); got != tc.want {
				t.Errorf("sameContent = %v, want %v", got, tc.want)
			}
		})
	}
	machine := func(rv string, change func(*machinev1beta1.Machine)) *machinev1beta1.Machine {
		m := &machinev1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", ResourceVersion: rv,
			OwnerReferences: []metav1.OwnerReference{{Kind: "MachineSet", Name: "ms", UID: "u1"}}},
			Spec:   machinev1beta1.MachineSpec{ObjectMeta: machinev1beta1.ObjectMeta{Labels: map[string]string{"a": "b"}}},
			Status: machinev1beta1.MachineStatus{Phase: ptrTo("Running"), NodeRef: &corev1.ObjectReference{Kind: "Node", Name: "n1"}}}
		if change != nil {
			change(m)
		}
		return m
	}
	machines := map[string]struct {
		change func(*machinev1beta1.Machine)
		want   bool
	}{
		"machine: only rv differs":        {nil, true},
		"machine: nodeRef changed":        {func(m *machinev1beta1.Machine) { m.Status.NodeRef.Name = "n2" }, false},
		"machine: nodeRef gone":           {func(m *machinev1beta1.Machine) { m.Status.NodeRef = nil }, false},
		"machine: phase changed":          {func(m *machinev1beta1.Machine) { m.Status.Phase = ptrTo("Deleting") }, false},
		"machine: spec.metadata.labels":   {func(m *machinev1beta1.Machine) { m.Spec.ObjectMeta.Labels["a"] = "c" }, false},
		"machine: owner changed":          {func(m *machinev1beta1.Machine) { m.OwnerReferences[0].UID = "u2" }, false},
		"machine: nodeRef's other fields": {func(m *machinev1beta1.Machine) { m.Status.NodeRef.UID = "x" }, true},
	}
	for name, tc := range machines {
		t.Run(name, func(t *testing.T) {
			a, _ := compact(machine("1", nil))
			b, _ := compact(machine("2", tc.change))
			if got := a.sameContent(b); got != tc.want {
				t.Errorf("sameContent = %v, want %v", got, tc.want)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// An update keeps what it did not change in the old record's memory: the store holds one copy
// of a Node's name, labels and taints across its heartbeats, not one made among each update's
// garbage.
func TestShareWithKeepsUnchangedFields(t *testing.T) {
	node := func(rv string, labels map[string]string) *corev1.Node {
		labels[corev1.LabelHostname] = "n"
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", ResourceVersion: rv, Labels: labels,
			Annotations: map[string]string{"hub-node-metadata.openshift.io/owned-labels": "a", "machine.openshift.io/machine": "ns/m"}},
			Spec: corev1.NodeSpec{ProviderID: "aws:///n", Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}}}
	}
	old, _ := compact(node("1", map[string]string{"a": "b"}))
	before := old.asNode()

	heartbeat, _ := compact(node("2", map[string]string{"a": "b"}))
	if heartbeat.shareWith(old) {
		t.Error("a heartbeat differs from the old record")
	}
	if unsafe.StringData(heartbeat.id) != unsafe.StringData(old.id) ||
		&heartbeat.labels.shared[0] != &old.labels.shared[0] || &heartbeat.annotations.shared[0] != &old.annotations.shared[0] ||
		unsafe.StringData(heartbeat.labels.own) != unsafe.StringData(old.labels.own) ||
		unsafe.StringData(heartbeat.annotations.own) != unsafe.StringData(old.annotations.own) ||
		heartbeat.taints != old.taints {
		t.Errorf("a heartbeat's record keeps its own copies: %+v, old %+v", heartbeat, old)
	}
	if got := heartbeat.resourceVersion(); got != "2" {
		t.Errorf("resourceVersion %q, want the update's", got)
	}

	relabelled, _ := compact(node("3", map[string]string{"a": "c"}))
	if !relabelled.shareWith(old) {
		t.Error("a label change does not differ from the old record")
	}
	if got := relabelled.labels.toMap(); got["a"] != "c" {
		t.Errorf("labels %v, want the update's", got)
	}
	if relabelled.taints != old.taints {
		t.Error("the unchanged taints are not the same interned list")
	}
	if after := old.asNode(); !reflect.DeepEqual(after, before) {
		t.Errorf("shareWith changed the old record: %+v, was %+v", after, before)
	}
}

// A Node's hostname label, its nodelink annotation and any value equal to its name are packed
// into the record's own string, not interned; every pair reads back as it was.
func TestPairsPackAnObjectsOwnPairs(t *testing.T) {
	long := strings.Repeat("x", 300) + "\x00\xff" // a length over one uvarint byte, and bytes JSON allows
	labels := map[string]string{corev1.LabelHostname: "ip-10-0-1-2", "kubernetes.io/os": "linux", "named-after": "n1", "empty": ""}
	annotations := map[string]string{"machine.openshift.io/machine": "openshift-machine-api/m1", "hub-node-metadata.openshift.io/owned-labels": long}
	r, err := compact(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels, Annotations: annotations}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(labels, r.labels.toMap()); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(annotations, r.annotations.toMap()); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	interned := func(p pairs) []string {
		var keys []string
		for _, h := range p.shared {
			keys = append(keys, h.Value().key)
		}
		return keys
	}
	if diff := cmp.Diff([]string{"empty", "kubernetes.io/os"}, interned(r.labels)); diff != "" {
		t.Errorf("interned labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"hub-node-metadata.openshift.io/owned-labels"}, interned(r.annotations)); diff != "" {
		t.Errorf("interned annotations (-want +got):\n%s", diff)
	}
	if (pairs{}).toMap() != nil {
		t.Error("no pairs read back as a non-nil map")
	}
}

// A record's labels answer a label selector as the map they stand for does (List matches
// them without making the map), for interned pairs and the object's own alike.
func TestPairsAreLabels(t *testing.T) {
	set := map[string]string{corev1.LabelHostname: "ip-10-0-1-2", "kubernetes.io/os": "linux", "named-after": "n1", "empty": "", "pool": "infra"}
	r, err := compact(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: set}})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.labels.len(); n != len(set) {
		t.Errorf("len() = %d, want %d", n, len(set))
	}
	for _, sel := range []string{
		"", "pool=infra", "pool=workers", "pool in (infra,workers)", "pool notin (infra)", "empty", "!empty", "empty=",
		corev1.LabelHostname + "=ip-10-0-1-2", corev1.LabelHostname + "!=ip-10-0-1-2", "named-after in (n1,n2)",
		"missing", "!missing", "missing=", "kubernetes.io/os=linux,pool=infra", "kubernetes.io/os=linux,pool=x",
	} {
		s, err := labels.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.Matches(&r.labels), s.Matches(labels.Set(set)); got != want {
			t.Errorf("%q matches the record's labels: %v, the map: %v", sel, got, want)
		}
	}
	for k, v := range set {
		if got, ok := r.labels.Lookup(k); !ok || got != v || !r.labels.Has(k) || r.labels.Get(k) != v {
			t.Errorf("Lookup(%q) = %q, %v; want %q", k, got, ok, v)
		}
	}
}

// A record keeps any resourceVersion as it came: a canonical decimal as a number, anything
// else (the API promises only an opaque string) in its id; and a heartbeat that changes only
// a resourceVersion that is not a number is still no change of content.
func TestRecordIdentity(t *testing.T) {
	for _, rv := range []string{"1", "18446744073709551615", "0", "007", "abc", "", "18446744073709551616"} {
		for _, providerID := range []string{"", "aws:///us-east-1a/i-0123456789abcdef0"} {
			var r record
			r.setIdentity("node-a", "0b6c2f9e-2f53-4d8c-9d3a-1f0e5b7c8a90", rv, providerID)
			name, uid, gotProviderID, _ := r.identity()
			got := []string{name, uid, r.resourceVersion(), gotProviderID}
			want := []string{"node-a", "0b6c2f9e-2f53-4d8c-9d3a-1f0e5b7c8a90", rv, providerID}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("rv %q, providerID %q: name, uid, resourceVersion, providerID (-want +got):\n%s", rv, providerID, diff)
			}
			if r.name() != "node-a" {
				t.Errorf("name() = %q", r.name())
			}
		}
	}
	node := func(rv string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", ResourceVersion: rv}, Spec: corev1.NodeSpec{ProviderID: "p"}}
	}
	a, _ := compact(node("v1"))
	b, _ := compact(node("v2"))
	if b.shareWith(a) {
		t.Error("a heartbeat with an opaque resourceVersion differs from the old record")
	}
	if got := b.resourceVersion(); got != "v2" {
		t.Errorf("resourceVersion %q after shareWith, want v2", got)
	}
	c, _ := compact(node("3"))
	d, _ := compact(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u2", ResourceVersion: "4"}, Spec: corev1.NodeSpec{ProviderID: "p"}})
	if !d.shareWith(c) {
		t.Error("a new uid (the Node deleted and made again) is no difference")
	}
}

// A record's taints are one interned list: the same taints give the same handle, and they read
// back as they came, in order, timeAdded to the nanosecond (in the local zone, as decoded) or nil.
func TestTaintListsReadBackAsTheyCame(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 26, 2, 40, 5, 123456789, time.UTC).Local())
	zero := metav1.Time{}
	in := []corev1.Taint{
		{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute, TimeAdded: &at},
		{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule},
		{Key: "zero-time", Effect: corev1.TaintEffectPreferNoSchedule, TimeAdded: &zero},
		{Key: "", Value: strings.Repeat("v", 200), Effect: ""},
	}
	got := taintsOf(internTaints(in))
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("taints read back (-in +got):\n%s", diff)
	}
	if !got[0].TimeAdded.Equal(&at) || got[0].TimeAdded.Location() != time.Local {
		t.Errorf("timeAdded %v, want %v in the local zone", got[0].TimeAdded, at)
	}
	if internTaints(slices.Clone(in)) != internTaints(in) {
		t.Error("the same taints are two lists")
	}
	if internTaints(in[1:]) == internTaints(in) || internTaints([]corev1.Taint{in[1], in[0]}) == internTaints(in[:2]) {
		t.Error("other taints, or the same in another order, are the same list")
	}
	if internTaints(nil) != (taintList{}) || taintsOf(taintList{}) != nil {
		t.Error("no taints are not the zero list, or do not read back as nil")
	}
}
