package int_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// The robustness model's checks on made-up histories: each case is a few
// writes of one Node, and the invariants they must break (none: they must
// pass). A check that cannot fail would pass every row.

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// hw is one write in a made-up history.
type hw struct {
	at       time.Duration // after t0
	who      string        // "pid N" (the controller), else a foreign user
	node     string        // default n1
	labels   map[string]string
	taints   []corev1.Taint
	owned    string // owned-labels record
	ownedT   string // owned-taints record
	owners   map[string]string
	notReady bool
	patch    string // a metadata-only answer to this merge patch
	machine  string // a Machine of this name whose Node is node, instead of the Node
	// taintOwner, on a Machine, owns its spec.taints; owners own its
	// spec.metadata.labels' keys.
	taintOwner string
}

// managedLabels is one managedFields entry per key of owners, owning the key
// in the label map at path.
func managedLabels(owners map[string]string, path ...string) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for _, key := range slices.Sorted(maps.Keys(owners)) {
		var f any = map[string]any{"f:" + key: map[string]any{}}
		for i := len(path) - 1; i >= 0; i-- {
			f = map[string]any{path[i]: f}
		}
		fields, _ := json.Marshal(f)
		out = append(out, metav1.ManagedFieldsEntry{Manager: owners[key], FieldsV1: metav1.NewFieldsV1(string(fields))})
	}
	return out
}

func (w hw) event(rv int) localfleet.AuditEvent {
	e := localfleet.AuditEvent{Verb: "update", RequestReceived: t0.Add(w.at), StageTimestamp: t0.Add(w.at)}
	e.ObjectRef.Resource, e.ObjectRef.Name = "nodes", w.node
	if e.ObjectRef.Name == "" {
		e.ObjectRef.Name = "n1"
	}
	e.ResponseStatus.Code = 200
	e.User.Username = w.who
	if pid, ok := strings.CutPrefix(w.who, "pid "); ok {
		e.User.Username, e.UserAgent, e.Verb = localfleet.CredentialUser, "hub-node-metadata/dev (vm; pid "+pid+")", "patch"
	}
	if w.machine != "" {
		mc := &machinev1beta1.Machine{TypeMeta: metav1.TypeMeta{Kind: "Machine", APIVersion: "machine.openshift.io/v1beta1"}}
		mc.Name, mc.ResourceVersion, mc.Spec.Taints = w.machine, strconv.Itoa(rv), w.taints
		mc.Spec.ObjectMeta.Labels = w.labels
		mc.Annotations = map[string]string{nmsync.AnnotationOwnedLabels: w.owned, nmsync.AnnotationOwnedTaints: w.ownedT}
		mc.ManagedFields = managedLabels(w.owners, "f:spec", "f:metadata", "f:labels")
		if w.taintOwner != "" {
			mc.ManagedFields = append(mc.ManagedFields, metav1.ManagedFieldsEntry{Manager: w.taintOwner, FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:taints":{}}}`)})
		}
		if e.ObjectRef.Name != "-" {
			mc.Status.NodeRef = &corev1.ObjectReference{Name: e.ObjectRef.Name}
		}
		e.ObjectRef.Resource, e.ObjectRef.Name = "machines", w.machine
		e.ResponseObject, _ = json.Marshal(mc)
		return e
	}
	n := &corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}}
	n.Name, n.ResourceVersion, n.Labels, n.Spec.Taints = e.ObjectRef.Name, strconv.Itoa(rv), w.labels, w.taints
	n.Annotations = map[string]string{nmsync.AnnotationOwnedLabels: w.owned, nmsync.AnnotationOwnedTaints: w.ownedT}
	n.ManagedFields = managedLabels(w.owners, "f:metadata", "f:labels")
	if w.notReady {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	}
	e.ResponseObject, _ = json.Marshal(n)
	if w.patch != "" {
		e.RequestObject = json.RawMessage(w.patch)
		meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}, ObjectMeta: n.ObjectMeta}
		e.ResponseObject, _ = json.Marshal(meta)
	}
	return e
}

func TestRobustnessChecks(t *testing.T) {
	p0, f0, sh := rbPrefix+"p0", "ext.example.com/f0", rbPrefix+"shared"
	x0 := func(v string) corev1.Taint { return localfleet.Taint(rbPrefix+"x0", v, corev1.TaintEffectNoExecute) }
	ft := localfleet.Taint("ext.example.com/ft", "1", corev1.TaintEffectNoSchedule)
	declare := map[string]string{"label/" + p0: "a", "label/" + sh: "a"}
	cases := []struct {
		name    string
		specs   map[time.Duration]map[string]string // when each spec was written, its Node items
		writes  []hw
		freezes []freeze
		holds   []hold
		faults  []interval
		want    []string
	}{
		{name: "the controller delivers a declared label", writes: []hw{
			{who: "kubelet", labels: map[string]string{f0: "1"}},
			{at: time.Second, who: "pid 1", labels: map[string]string{f0: "1", p0: "a"}, owned: p0},
		}},
		{name: "the controller removes a foreign label", want: []string{invForeign}, writes: []hw{
			{who: "kubelet", labels: map[string]string{f0: "1"}},
			{at: time.Second, who: "pid 1", labels: map[string]string{p0: "a"}, owned: p0},
		}},
		{name: "a foreign taint is stripped, seen through a metadata-only answer", want: []string{invForeign}, writes: []hw{
			{who: "kubectl", taints: []corev1.Taint{ft}},
			{at: time.Second, who: "pid 1", patch: `{"spec":{"taints":null},"metadata":{"resourceVersion":"1"}}`},
		}},
		{name: "a value no pool declared", want: []string{invDeclared}, writes: []hw{
			{who: "kubelet"},
			{at: time.Second, who: "pid 1", labels: map[string]string{p0: "b"}, owned: p0},
		}},
		{name: "a value the pool declared 40 s before, and no longer", want: []string{invDeclared},
			specs: map[time.Duration]map[string]string{-40 * time.Second: {"label/" + p0: "b"}, -35 * time.Second: {"label/" + p0: "a"}},
			writes: []hw{
				{who: "kubelet"},
				{at: time.Second, who: "pid 1", labels: map[string]string{p0: "b"}, owned: p0},
			}},
		{name: "a dropped label it owned is removed",
			specs: map[time.Duration]map[string]string{-time.Minute: {"label/" + p0: "a"}, 0: {}},
			writes: []hw{
				{who: "pid 1", labels: map[string]string{p0: "a"}, owned: p0, owners: map[string]string{p0: nmsync.FieldManager}},
				{at: time.Second, who: "pid 1"},
			}},
		{name: "a dropped label it did not record is removed", want: []string{invRemoval},
			specs: map[time.Duration]map[string]string{-time.Minute: {"label/" + p0: "a"}, 0: {}},
			writes: []hw{
				{who: "kubectl", labels: map[string]string{p0: "a"}},
				{at: time.Second, who: "pid 1"},
			}},
		{name: "a dropped label someone else also set is removed", want: []string{invRemoval},
			specs: map[time.Duration]map[string]string{-time.Minute: {"label/" + sh: "a"}, 0: {}},
			writes: []hw{
				{who: "pid 1", labels: map[string]string{sh: "a"}, owned: sh, owners: map[string]string{sh: "kubectl-label"}},
				{at: time.Second, who: "pid 1"},
			}},
		{name: "a dropped label and taint the template delivered, never recorded, go from the Machine, and nodelink's copies from its Node",
			specs: map[time.Duration]map[string]string{-time.Minute: {"label/" + p0: "a", "taint/" + rbPrefix + "x0:NoExecute": "a"}, 0: {}},
			writes: []hw{
				{who: "machineset-controller", machine: "m1", labels: map[string]string{p0: "a"}, taints: []corev1.Taint{x0("a")},
					owners: map[string]string{p0: localfleet.MachineSetFieldManager}, taintOwner: localfleet.MachineSetFieldManager},
				{who: localfleet.NodelinkUser, labels: map[string]string{p0: "a"}, taints: []corev1.Taint{x0("a")}},
				{at: time.Second, who: "pid 1", machine: "m1"},
				{at: 1100 * time.Millisecond, who: "pid 1"},
			}},
		{name: "a dropped label on a Machine, never recorded, that someone else wrote too is removed", want: []string{invRemoval},
			specs: map[time.Duration]map[string]string{-time.Minute: {"label/" + p0: "a"}, 0: {}},
			writes: []hw{
				{who: "kubectl", machine: "m1", labels: map[string]string{p0: "a"}, owners: map[string]string{p0: "kubectl-label"}},
				{at: time.Second, who: "pid 1", machine: "m1"},
			}},
		{name: "a taint on a Machine, never recorded, in a list someone else wrote is removed", want: []string{invRemoval},
			specs: map[time.Duration]map[string]string{-time.Minute: {"taint/" + rbPrefix + "x0:NoExecute": "a"}, 0: {}},
			writes: []hw{
				{who: "kubectl", machine: "m1", taints: []corev1.Taint{x0("a")}, taintOwner: nmsync.FieldManager},
				{at: time.Second, who: "pid 1", machine: "m1"},
			}},
		{name: "nodelink's copy on a Node, never recorded, is removed while its Machine keeps the item", want: []string{invRemoval},
			specs: map[time.Duration]map[string]string{-time.Minute: {"label/" + p0: "a"}, 0: {}},
			writes: []hw{
				{who: "machineset-controller", machine: "m1", labels: map[string]string{p0: "a"}, owners: map[string]string{p0: "kubectl-label"}},
				{who: localfleet.NodelinkUser, labels: map[string]string{p0: "a"}},
				{at: time.Second, who: "pid 1"},
			}},
		{name: "a declared label is removed", want: []string{invRemoval}, writes: []hw{
			{who: "pid 1", labels: map[string]string{p0: "a"}, owned: p0},
			{at: time.Second, who: "pid 1"},
		}},
		{name: "NoExecute batches on two Machines within the interval", want: []string{invPacing},
			specs: map[time.Duration]map[string]string{0: {"taint/" + rbPrefix + "x0:NoExecute": "a"}},
			writes: []hw{
				{who: "machineset-controller", machine: "m1", node: "n1"}, {who: "machineset-controller", machine: "m2", node: "n2"},
				{at: time.Second, who: "pid 1", machine: "m1", node: "n1", taints: []corev1.Taint{x0("a")}},
				{at: 2 * time.Second, who: "pid 1", machine: "m2", node: "n2", taints: []corev1.Taint{x0("a")}},
			}},
		{name: "NoExecute batches an interval apart",
			specs: map[time.Duration]map[string]string{0: {"taint/" + rbPrefix + "x0:NoExecute": "a"}},
			writes: []hw{
				{who: "machineset-controller", machine: "m1", node: "n1"}, {who: "machineset-controller", machine: "m2", node: "n2"},
				{at: time.Second, who: "pid 1", machine: "m1", node: "n1", taints: []corev1.Taint{x0("a")}},
				{at: 5 * time.Second, who: "pid 1", machine: "m2", node: "n2", taints: []corev1.Taint{x0("a")}},
			}},
		{name: "a Machine without a Node is in no batch",
			specs: map[time.Duration]map[string]string{0: {"taint/" + rbPrefix + "x0:NoExecute": "a"}},
			writes: []hw{
				{who: "machineset-controller", machine: "m1", node: "n1"}, {who: "machineset-controller", machine: "m2", node: "-"},
				{at: time.Second, who: "pid 1", machine: "m1", node: "n1", taints: []corev1.Taint{x0("a")}},
				{at: 2 * time.Second, who: "pid 1", machine: "m2", node: "-", taints: []corev1.Taint{x0("a")}},
			}},
		{name: "a Machine whose Node holds the taint already completes a batch",
			specs: map[time.Duration]map[string]string{0: {"taint/" + rbPrefix + "x0:NoExecute": "a"}},
			writes: []hw{
				{who: "machineset-controller", machine: "m1", node: "n1"}, {who: "machineset-controller", machine: "m2", node: "n2"},
				{who: "nodelink", node: "n2", taints: []corev1.Taint{x0("a")}},
				{at: time.Second, who: "pid 1", machine: "m1", node: "n1", taints: []corev1.Taint{x0("a")}},
				{at: 2 * time.Second, who: "pid 1", machine: "m2", node: "n2", taints: []corev1.Taint{x0("a")}},
			}},
		{name: "Nodes whose Machines the template tainted complete no batch's count",
			specs: map[time.Duration]map[string]string{0: {"taint/" + rbPrefix + "x0:NoExecute": "a"}},
			writes: []hw{
				{who: "kubelet", node: "n1"}, {who: "kubelet", node: "n2"},
				{at: time.Second, who: "pid 1", node: "n1", taints: []corev1.Taint{x0("a")}},
				{at: 2 * time.Second, who: "pid 1", node: "n2", taints: []corev1.Taint{x0("a")}},
			}},
		{name: "a batch while a Node the rollout tainted is NotReady", want: []string{invHealthGate},
			specs: map[time.Duration]map[string]string{0: {"taint/" + rbPrefix + "x0:NoExecute": "a"}},
			writes: []hw{
				{who: "kubelet", node: "n1"}, {who: "machineset-controller", machine: "m2", node: "n2"},
				{at: time.Second, who: "pid 1", node: "n1", taints: []corev1.Taint{x0("a")}},
				{at: 2 * time.Second, who: "kubelet", node: "n1", taints: []corev1.Taint{x0("a")}, notReady: true},
				{at: 10 * time.Second, who: "pid 1", machine: "m2", node: "n2", taints: []corev1.Taint{x0("a")}},
			}},
		{name: "a batch while a Node an earlier rollout of the same value tainted is NotReady",
			specs: map[time.Duration]map[string]string{0: {"taint/" + rbPrefix + "x0:NoExecute": "a"}, 1500 * time.Millisecond: {}, 5 * time.Second: {"taint/" + rbPrefix + "x0:NoExecute": "a"}},
			writes: []hw{
				{who: "kubelet", node: "n1"}, {who: "machineset-controller", machine: "m2", node: "n2"},
				{at: time.Second, who: "pid 1", node: "n1", taints: []corev1.Taint{x0("a")}, ownedT: rbPrefix + "x0:NoExecute"},
				{at: 2 * time.Second, who: "pid 1", node: "n1"},
				{at: 3 * time.Second, who: "kubelet", node: "n1", notReady: true},
				{at: 10 * time.Second, who: "pid 1", machine: "m2", node: "n2", taints: []corev1.Taint{x0("a")}},
			}},
		{name: "two replicas write 100 ms apart", want: []string{invOneWriter}, writes: []hw{
			{who: "kubelet"},
			{at: time.Second, who: "pid 1", labels: map[string]string{p0: "a"}, owned: p0},
			{at: 1100 * time.Millisecond, who: "pid 2", labels: map[string]string{p0: "a", sh: "a"}, owned: p0 + "," + sh},
		}},
		{name: "a replica takes over after the Lease", writes: []hw{
			{who: "kubelet"},
			{at: time.Second, who: "pid 1", labels: map[string]string{p0: "a"}, owned: p0},
			{at: 6 * time.Second, who: "pid 2", labels: map[string]string{p0: "a", sh: "a"}, owned: p0 + "," + sh},
		}},
		{name: "a resumed leader writes", want: []string{invFrozen},
			freezes: []freeze{{pid: "1", stopped: t0.Add(2 * time.Second), resumed: t0.Add(20 * time.Second)}},
			writes: []hw{
				{who: "kubelet"},
				{at: time.Second, who: "pid 1", labels: map[string]string{p0: "a"}, owned: p0},
				{at: 10 * time.Second, who: "pid 2", labels: map[string]string{p0: "a", sh: "a"}, owned: p0 + "," + sh},
				{at: 21 * time.Second, who: "pid 1", labels: map[string]string{p0: "a", sh: "a"}, owned: p0},
			}},
		{name: "a write while paused", want: []string{invHeld},
			holds: []hold{{interval: interval{t0, t0.Add(time.Minute)}, what: "paused"}},
			writes: []hw{
				{who: "kubelet"},
				{at: 10 * time.Second, who: "pid 1", labels: map[string]string{p0: "a"}, owned: p0},
			}},
		{name: "a write while paused, just after a spoke fault",
			holds:  []hold{{interval: interval{t0, t0.Add(time.Minute)}, what: "paused"}},
			faults: []interval{{t0, t0.Add(5 * time.Second)}},
			writes: []hw{
				{who: "kubelet"},
				{at: 10 * time.Second, who: "pid 1", labels: map[string]string{p0: "a"}, owned: p0},
			}},
		{name: "a hot loop", want: []string{invBounded}, writes: hotLoop()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newModel("s", 1, 4*time.Second)
			if c.specs == nil {
				c.specs = map[time.Duration]map[string]string{-time.Minute: declare}
			}
			for _, at := range slices.Sorted(maps.Keys(c.specs)) {
				m.specs = append(m.specs, poolSpecAt{at: t0.Add(at), node: c.specs[at], machine: c.specs[at]})
			}
			m.freezes, m.holds, m.spokeFaults = c.freezes, c.holds, c.faults
			var es []localfleet.AuditEvent
			for i, w := range c.writes {
				es = append(es, w.event(i+1))
			}
			m.feed(es)
			m.process(t0.Add(time.Hour))
			m.checkWriters()
			m.checkHolds()
			var got []string
			for _, v := range m.violations {
				if !slices.Contains(got, v.Invariant) {
					got = append(got, v.Invariant)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("broke %v, want %v: %v", got, c.want, m.violations)
			}
		})
	}
}

// hotLoop is a label set and taken away every second by two writers.
func hotLoop() []hw {
	out := []hw{{who: "kubelet"}}
	for i := 1; i < 24; i++ {
		w := hw{at: time.Duration(i) * 500 * time.Millisecond, who: "kubectl"}
		if i%2 == 0 {
			w.who, w.labels, w.owned = "pid 1", map[string]string{rbPrefix + "p0": "a"}, rbPrefix+"p0"
		}
		out = append(out, w)
	}
	return out
}
