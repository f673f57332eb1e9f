package remote

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An update that changes nothing a record keeps but a numeric resourceVersion (a Node's
// status heartbeat, a re-list of an unchanged object) stores the version in the record it
// has: no record is made, so the packed arena stays whole. Any other change makes a record.
func TestUpdatesThatChangeOnlyTheVersionKeepTheRecord(t *testing.T) {
	pk := newPacker(time.Hour, clocktesting.NewFakeClock(time.Now()))
	st := packedStore(spokeKinds[0], pk)
	sc := &spokeCache{stores: []*kindStore{st}}
	defer pk.stop()
	rvOf := func(name string) string {
		t.Helper()
		n := &corev1.Node{}
		if err := sc.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
			t.Fatal(err)
		}
		return n.ResourceVersion
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.replaceObjects([]any{testNode("a", "1", map[string]string{"x": "1"}), testNode("b", "1", nil)}, "1"))
	first := st.items["a"]
	loose := func() int { pk.mu.Lock(); defer pk.mu.Unlock(); return pk.loose }
	if loose() != 2 {
		t.Fatalf("loose %d after the first list, want 2", loose())
	}

	must(st.Add(testNode("a", "2", map[string]string{"x": "1"})))
	if st.items["a"] != first || rvOf("a") != "2" || loose() != 2 {
		t.Errorf("heartbeat: same record %v, resourceVersion %q, loose %d; want the same record at 2, loose 2", st.items["a"] == first, rvOf("a"), loose())
	}
	must(st.replaceObjects([]any{testNode("a", "3", map[string]string{"x": "1"}), testNode("b", "3", nil)}, "3"))
	if st.items["a"] != first || rvOf("a") != "3" || rvOf("b") != "3" || loose() != 2 {
		t.Errorf("re-list: same record %v, resourceVersions %q %q, loose %d; want the same record, both at 3, loose 2", st.items["a"] == first, rvOf("a"), rvOf("b"), loose())
	}

	must(st.Add(testNode("a", "4", map[string]string{"x": "2"})))
	if st.items["a"] == first || rvOf("a") != "4" || loose() != 3 {
		t.Errorf("label change: new record %v, resourceVersion %q, loose %d; want a new record at 4, loose 3", st.items["a"] != first, rvOf("a"), loose())
	}
	if first.resourceVersion() != "3" {
		t.Errorf("the replaced record moved to %q: a reader holding it saw an update it does not hold", first.resourceVersion())
	}
	second := st.items["a"]
	must(st.Add(testNode("a", "v5", map[string]string{"x": "2"}))) // not a number: kept in the identity string
	if st.items["a"] == second || rvOf("a") != "v5" {
		t.Errorf("a resourceVersion that is not a number: new record %v, resourceVersion %q", st.items["a"] != second, rvOf("a"))
	}
	must(st.Delete(testNode("b", "6", nil)))
	if loose() != 5 {
		t.Errorf("loose %d after a change, a non-numeric version and a delete, want 5", loose())
	}
}

// A spoke's records are packed once enough of them are loose: what the cache serves does not
// change, every record is a new one in the arena (the loose ones can be freed), and the maps'
// keys are the packed records' names. A lone change among many does not repack them all.
func TestPackerPacksTheLooseRecords(t *testing.T) {
	pk := newPacker(time.Hour, clocktesting.NewFakeClock(time.Now())) // quietFor is called by the test
	defer pk.stop()
	sc := &spokeCache{packer: pk}
	for _, k := range spokeKinds {
		sc.stores = append(sc.stores, packedStore(k, pk))
	}
	var nodes, machines, sets []any
	for i := range 40 {
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), UID: "u", ResourceVersion: "1",
			Labels:      map[string]string{corev1.LabelHostname: fmt.Sprintf("n%d", i), "pool": "infra"},
			Annotations: map[string]string{"machine.openshift.io/machine": fmt.Sprintf("ns/m%d", i)}},
			Spec: corev1.NodeSpec{ProviderID: fmt.Sprintf("aws:///i-%d", i), Taints: []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}}})
		phase := "Running"
		machines = append(machines, &machinev1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: MachineAPINamespace, Name: fmt.Sprintf("m%d", i), ResourceVersion: "1",
			Labels:          map[string]string{"machine.openshift.io/cluster-api-machineset": "ms"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet", Name: "ms", UID: "ms-uid"}}},
			Spec:   machinev1beta1.MachineSpec{ObjectMeta: machinev1beta1.ObjectMeta{Labels: map[string]string{"pool": "infra"}}},
			Status: machinev1beta1.MachineStatus{Phase: &phase, NodeRef: &corev1.ObjectReference{Name: fmt.Sprintf("n%d", i)}}})
	}
	sets = append(sets, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: MachineAPINamespace, Name: "ms", ResourceVersion: "1", Labels: map[string]string{"hive.openshift.io/machine-pool": "infra"}}})
	for i, list := range [][]any{nodes, machines, sets} {
		if err := sc.stores[i].replaceObjects(list, "1"); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	served := func() (out []any) {
		for _, l := range []client.ObjectList{&corev1.NodeList{}, &machinev1beta1.MachineList{}, &machinev1beta1.MachineSetList{}} {
			if err := sc.List(ctx, l); err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	before := served()
	loose := map[*record]bool{}
	for _, st := range sc.stores {
		for _, r := range st.items {
			loose[r] = true
		}
	}

	pk.quietFor()
	if pk.packs != 1 {
		t.Fatalf("packs %d after the first lists, want 1", pk.packs)
	}
	if diff := cmp.Diff(before, served()); diff != "" {
		t.Errorf("packing changed what the cache serves (-before +after):\n%s", diff)
	}
	for _, st := range sc.stores {
		for key, r := range st.items {
			if loose[r] {
				t.Errorf("%s %s is still its loose record", st.spec.gvk.Kind, key)
			}
			if unsafe.StringData(key) != unsafe.StringData(r.name()) {
				t.Errorf("%s %s: the map's key is not the packed record's name", st.spec.gvk.Kind, key)
			}
		}
	}
	// The packed records sit side by side in one array.
	first := sc.stores[0].items["n0"]
	var inArena int
	for _, st := range sc.stores {
		for _, r := range st.items {
			if d := uintptr(unsafe.Pointer(r)) - uintptr(unsafe.Pointer(first)); d < 81*unsafe.Sizeof(record{}) || -d < 81*unsafe.Sizeof(record{}) {
				inArena++
			}
		}
	}
	if inArena != 81 {
		t.Errorf("%d of 81 records are in the arena's array", inArena)
	}

	// One change among 81 records: not worth copying them all.
	if err := sc.stores[0].Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u", ResourceVersion: "2", Labels: map[string]string{"pool": "other"}}}); err != nil {
		t.Fatal(err)
	}
	pk.quietFor()
	if pk.packs != 1 {
		t.Errorf("packs %d after one change among 81 records, want still 1", pk.packs)
	}
	for i := 2; i < 12; i++ { // 11 of 81 loose: over an eighth
		if err := sc.stores[0].Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), UID: "u", ResourceVersion: "2"}}); err != nil {
			t.Fatal(err)
		}
	}
	pk.quietFor()
	if pk.packs != 2 {
		t.Errorf("packs %d after 11 changes among 81 records, want 2", pk.packs)
	}
}

// The packing waits for the spoke to go quiet, on the cache's clock: each change puts it off,
// and a stopped cache is not packed.
func TestPackerWaitsForQuiet(t *testing.T) {
	packs := func(pk *packer) int { pk.mu.Lock(); defer pk.mu.Unlock(); return pk.packs }
	clk := clocktesting.NewFakeClock(time.Now())
	pk := newPacker(time.Second, clk)
	st := packedStore(spokeKinds[0], pk)
	for i := range 5 {
		if err := st.Add(testNode(fmt.Sprintf("n%d", i), "1", nil)); err != nil {
			t.Fatal(err)
		}
		clk.Step(900 * time.Millisecond)
		if packs(pk) != 0 {
			t.Fatalf("packed after change %d, while changes came every 900ms and the quiet is 1s", i)
		}
	}
	clk.Step(100 * time.Millisecond)
	if packs(pk) != 1 {
		t.Fatalf("packs %d once the last change was 1s old, want 1", packs(pk))
	}
	clk.Step(time.Hour)
	if packs(pk) != 1 {
		t.Fatalf("packs %d an hour later without a change, want 1", packs(pk))
	}

	stopped := newPacker(10*time.Millisecond, clk)
	st2 := packedStore(spokeKinds[0], stopped)
	if err := st2.Add(testNode("a", "1", nil)); err != nil {
		t.Fatal(err)
	}
	stopped.stop()
	clk.Step(time.Second)
	if packs(stopped) != 0 {
		t.Error("a stopped cache was packed")
	}
}

// An arena's array fills whole pages when that wastes at most an eighth of it.
func TestPageRounded(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{0, 0},
		{10, 10},     // 80 bytes: an eighth of a page is more than it
		{1000, 1024}, // 8000 bytes: a page, 192 bytes more
		{1300, 1300}, // 10400 bytes: two pages would waste 5984
		{3600, 3600}, // 28800 bytes: four pages would waste 3968, over an eighth
		{5000, 5120}, // 40000 bytes: five pages
	} {
		if got := pageRounded[uint64](tc.n); got != tc.want {
			t.Errorf("pageRounded[uint64](%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// packedStore returns an empty store of kind k whose records pk packs.
func packedStore(k kindSpec, pk *packer) *kindStore {
	st := &kindStore{spec: k, notify: func() {}, packer: pk, items: map[string]*record{}, synced: make(chan struct{})}
	pk.stores = append(pk.stores, st)
	return st
}
