package spokecache

import (
	"context"
	"testing"
	"unsafe"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

func testNode(name, rv string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, Labels: labels}}
}

func TestKindStoreNotifications(t *testing.T) {
	notified := 0
	st := &kindStore{spec: nodeSpec, notify: func() { notified++ }, items: map[string]*record{}, synced: make(chan struct{})}
	step := func(name string, err error, want int) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if notified != want {
			t.Errorf("%s: %d notifications, want %d", name, notified, want)
		}
	}
	step("an event before the first list", st.addObject(testNode("early", "1", nil)), 0)
	step("first list", st.replaceObjects([]any{testNode("a", "1", map[string]string{"x": "1"}), testNode("b", "1", nil)}, "1"), 0)
	select {
	case <-st.synced:
	default:
		t.Fatal("not synced after the first list")
	}
	step("heartbeat (rv only)", st.addObject(testNode("a", "2", map[string]string{"x": "1"})), 0)
	step("label change", st.addObject(testNode("a", "3", map[string]string{"x": "2"})), 1)
	step("new Node", st.addObject(testNode("c", "4", nil)), 2)
	step("delete", st.deleteObject(testNode("c", "5", nil)), 3)
	step("delete of an unknown Node", st.deleteObject(testNode("zz", "5", nil)), 3)
	step("delete b", st.deleteObject(testNode("b", "1", nil)), 4)
	step("re-list, same content", st.replaceObjects([]any{testNode("a", "9", map[string]string{"x": "2"})}, "9"), 4)
	step("re-list, one gone", st.replaceObjects([]any{}, "10"), 5)
	for _, c := range []codec{nodeCodec{}, machineCodec{}, machineSetCodec{}} {
		if _, err := c.compact(&corev1.ConfigMap{}); err == nil {
			t.Errorf("%T made a record of a ConfigMap", c)
		}
	}
}

// Refresh recognises a heartbeat: an event of the digest its record was made from, at a
// numeric resourceVersion. Then the record takes the version, and nothing is notified;
// otherwise nothing changes, and the event is decoded.
func TestRefresh(t *testing.T) {
	const digest = 0x5eed
	for name, tc := range map[string]struct {
		recordRV     string // the record's resourceVersion
		recordDigest uint64 // 0: made from no digest (a JSON list)
		node         string // the event's Node
		digest       uint64
		rv           string
		want         bool
		wantRV       string // the record's resourceVersion after
	}{
		"a heartbeat":                         {recordRV: "5", recordDigest: digest, node: "a", digest: digest, rv: "6", want: true, wantRV: "6"},
		"a change the digest sees":            {recordRV: "5", recordDigest: digest, node: "a", digest: digest + 1, rv: "6", wantRV: "5"},
		"a Node the store lacks":              {recordRV: "5", recordDigest: digest, node: "b", digest: digest, rv: "6", wantRV: "5"},
		"a record made without a digest":      {recordRV: "5", node: "a", digest: digest, rv: "6", wantRV: "5"},
		"no digest on either side":            {recordRV: "5", node: "a", rv: "6", wantRV: "5"},
		"a version that is not a number":      {recordRV: "5", recordDigest: digest, node: "a", digest: digest, rv: "x6", wantRV: "5"},
		"a version with a leading zero":       {recordRV: "5", recordDigest: digest, node: "a", digest: digest, rv: "06", wantRV: "5"},
		"an empty version":                    {recordRV: "5", recordDigest: digest, node: "a", digest: digest, rv: "", wantRV: "5"},
		"a record whose version is no number": {recordRV: "v5", recordDigest: digest, node: "a", digest: digest, rv: "6", wantRV: "v5"},
	} {
		t.Run(name, func(t *testing.T) {
			notified := 0
			st := &kindStore{spec: nodeSpec, notify: func() { notified++ }, items: map[string]*record{}, synced: make(chan struct{})}
			r := compactNode(testNode("a", tc.recordRV, map[string]string{"x": "1"}))
			r.digest = tc.recordDigest
			st.Replace([]*record{r})
			if got := st.Refresh(tc.node, tc.digest, tc.rv); got != tc.want {
				t.Errorf("Refresh: %v, want %v", got, tc.want)
			}
			if got := st.items["a"].resourceVersion(); got != tc.wantRV {
				t.Errorf("the record's resourceVersion %q, want %q", got, tc.wantRV)
			}
			if notified != 0 {
				t.Errorf("notified %d times", notified)
			}
		})
	}
}

func TestSpokeCacheReads(t *testing.T) {
	sc := &Cache{}
	for _, k := range spokeKinds {
		sc.stores = append(sc.stores, &kindStore{spec: k.spec, notify: func() {}, items: map[string]*record{}, synced: make(chan struct{})})
	}
	ctx := context.Background()
	if err := sc.stores[0].replaceObjects([]any{testNode("n2", "1", map[string]string{"role": "infra"}), testNode("n1", "1", map[string]string{"role": "worker"})}, "1"); err != nil {
		t.Fatal(err)
	}
	m := &machinev1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: nmsync.MachineAPINamespace, Name: "m1", Labels: map[string]string{"a": "b"}}}
	if err := sc.stores[1].replaceObjects([]any{m}, "1"); err != nil {
		t.Fatal(err)
	}

	nodes := &corev1.NodeList{}
	if err := sc.List(ctx, nodes); err != nil || len(nodes.Items) != 2 || nodes.Items[0].Name != "n1" {
		t.Fatalf("List nodes = %v, %+v", err, nodes.Items)
	}
	// Callers own what they get.
	nodes.Items[0].Labels["role"] = "changed"
	again := &corev1.Node{}
	if err := sc.Get(ctx, client.ObjectKey{Name: "n1"}, again); err != nil || again.Labels["role"] != "worker" || again.Kind != "Node" {
		t.Errorf("Get after a caller's change = %v, %+v", err, again)
	}
	if err := sc.List(ctx, nodes, client.MatchingLabels{"role": "infra"}); err != nil || len(nodes.Items) != 1 || nodes.Items[0].Name != "n2" {
		t.Errorf("List by label = %v, %+v", err, nodes.Items)
	}
	machines := &machinev1beta1.MachineList{}
	if err := sc.List(ctx, machines, client.InNamespace("other")); err != nil || len(machines.Items) != 0 {
		t.Errorf("List in another namespace = %v, %+v", err, machines.Items)
	}
	if err := sc.List(ctx, machines, client.InNamespace(nmsync.MachineAPINamespace)); err != nil || len(machines.Items) != 1 {
		t.Errorf("List machines = %v, %+v", err, machines.Items)
	}
	if err := sc.Get(ctx, client.ObjectKey{Namespace: "other", Name: "m1"}, &machinev1beta1.Machine{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get in another namespace = %v, want NotFound", err)
	}
	if err := sc.Get(ctx, client.ObjectKey{Name: "missing"}, &corev1.Node{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get missing = %v, want NotFound", err)
	}
	if err := sc.List(ctx, &hivev1.MachinePoolList{}); err == nil {
		t.Error("listed a kind that is not cached")
	}
	if err := sc.List(ctx, nodes, client.MatchingFields{"spec.unschedulable": "true"}); err == nil {
		t.Error("a field selector was accepted")
	}
}

// A store's map key is the name inside the record it maps to, after an update and after a
// re-list alike: a key cut from an update's own identity string, which shareWith then drops
// for the old record's, would keep that string alive beside the one the record holds.
func TestKindStoreKeysShareTheRecordsIdentity(t *testing.T) {
	st := &kindStore{spec: nodeSpec, notify: func() {}, items: map[string]*record{}, synced: make(chan struct{})}
	check := func(step string) {
		t.Helper()
		for key, r := range st.items {
			if unsafe.StringData(key) != unsafe.StringData(r.name()) {
				t.Errorf("%s: the key %q is a string of its own, not the record's", step, key)
			}
		}
	}
	if err := st.replaceObjects([]any{testNode("a", "1", nil), testNode("b", "1", nil)}, "1"); err != nil {
		t.Fatal(err)
	}
	check("first list")
	if err := st.addObject(testNode("a", "2", nil)); err != nil {
		t.Fatal(err)
	}
	check("heartbeat")
	if err := st.replaceObjects([]any{testNode("a", "3", nil), testNode("b", "3", nil)}, "3"); err != nil {
		t.Fatal(err)
	}
	check("re-list")
}
