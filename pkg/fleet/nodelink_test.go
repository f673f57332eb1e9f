package fleet

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

func TestNodeMemory(t *testing.T) {
	target := func(node string, machineLabels map[string]string) nmsync.Target {
		return nmsync.Target{
			Machine: &machinev1beta1.Machine{Spec: machinev1beta1.MachineSpec{ObjectMeta: machinev1beta1.ObjectMeta{Labels: machineLabels}}},
			Node:    &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
		}
	}
	now := time.Unix(1000, 0)
	m := newNodeMemory(2*time.Second, func() time.Time { return now })
	wrote := nmsync.Result{Kind: nmsync.ResultKindNode, Name: "n1", Outcome: nmsync.OutcomePatched, Changes: []nmsync.Change{
		{Kind: nmsync.KindNodeLabel, Op: nmsync.OpRemove, Key: "gone", From: "v1"},
		{Kind: nmsync.KindTaint, Op: nmsync.OpRemove, Key: "gone:NoSchedule", From: "t1"},
		{Kind: nmsync.KindNodeLabel, Op: nmsync.OpUpdate, Key: "tier", From: "old", To: "new"},
	}}
	m.record("ns/c", wrote)
	m.record("ns/c", nmsync.Result{Kind: nmsync.ResultKindMachine, Name: "n1", Outcome: nmsync.OutcomePatched,
		Changes: []nmsync.Change{{Kind: nmsync.KindNodeLabel, Op: nmsync.OpRemove, Key: "machine-only", From: "x"}}})
	want := nmsync.Reclaim{Labels: map[string]string{"gone": "v1"}, Taints: map[string]string{"gone:NoSchedule": "t1"}}
	if diff := cmp.Diff(want, m.reclaim("ns/c", target("n1", nil))); diff != "" {
		t.Errorf("reclaim (-want +got):\n%s", diff)
	}
	if got := m.reclaim("ns/c", target("n1", map[string]string{"gone": "v1"})); len(got.Labels) != 0 {
		t.Errorf("the Machine holds gone=v1, so nodelink's copy is right: reclaim %+v", got)
	}
	if got := m.reclaim("ns/other", target("n1", nil)); got.Labels != nil || got.Taints != nil {
		t.Errorf("another cluster's Node: %+v", got)
	}

	hold := m.holdBack("ns/c")
	copyBack := []nmsync.Change{{Kind: nmsync.KindNodeLabel, Op: nmsync.OpReclaim, Key: "gone", From: "v1"}}
	revert := []nmsync.Change{{Kind: nmsync.KindNodeLabel, Op: nmsync.OpUpdate, Key: "tier", From: "old", To: "new"}} // back to what was written
	poolChange := []nmsync.Change{{Kind: nmsync.KindNodeLabel, Op: nmsync.OpAdd, Key: "fresh", To: "1"}}
	now = now.Add(time.Second)
	for _, tc := range []struct {
		name    string
		kind    string
		changes []nmsync.Change
		want    bool
	}{
		{"a copy-back right after the write waits", nmsync.ResultKindNode, copyBack, true},
		{"a value set back right after the write waits", nmsync.ResultKindNode, revert, true},
		{"a pool change is written at once", nmsync.ResultKindNode, append(copyBack, poolChange...), false},
		{"a new value for a reverted label is the pool's: written at once", nmsync.ResultKindNode,
			[]nmsync.Change{{Kind: nmsync.KindNodeLabel, Op: nmsync.OpUpdate, Key: "tier", From: "old", To: "newer"}}, false},
		{"nothing to change but the records: written at once", nmsync.ResultKindNode, nil, false},
		{"Machines never wait", nmsync.ResultKindMachine, copyBack, false},
	} {
		if got := hold(tc.kind, "n1", tc.changes); got != tc.want {
			t.Errorf("%s: holdBack = %v, want %v", tc.name, got, tc.want)
		}
	}
	now = now.Add(1500 * time.Millisecond)
	if hold(nmsync.ResultKindNode, "n1", copyBack) {
		t.Error("still held after the settle time")
	}
	// A reclaim does not extend the tombstone: a copy that keeps coming back
	// is left once the TTL is over.
	m.record("ns/c", nmsync.Result{Kind: nmsync.ResultKindNode, Name: "n1", Outcome: nmsync.OutcomePatched,
		Changes: []nmsync.Change{{Kind: nmsync.KindNodeLabel, Op: nmsync.OpReclaim, Key: "gone", From: "v1"}}})
	now = now.Add(tombstoneTTL)
	if got := m.reclaim("ns/c", target("n1", nil)); len(got.Labels)+len(got.Taints) != 0 {
		t.Errorf("tombstones outlived their TTL: %+v", got)
	}
	now = now.Add(tombstoneTTL)
	m.sweep("ns/c")
	if len(m.clusters) != 0 {
		t.Errorf("sweep left %d clusters of expired records", len(m.clusters))
	}
	m.record("ns/c", wrote)
	m.forget(types.NamespacedName{Namespace: "ns", Name: "c"})
	if len(m.clusters) != 0 {
		t.Errorf("forget left %d clusters", len(m.clusters))
	}
}
