package fleet

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

func res(kind, name string, o nmsync.Outcome, changes ...nmsync.Change) nmsync.Result {
	r := nmsync.Result{Kind: kind, Name: name, Outcome: o, Changes: changes}
	if o == nmsync.OutcomePatched {
		r.Requests = 1
	}
	return r
}

func TestStatus(t *testing.T) {
	add := nmsync.Change{Kind: nmsync.KindNodeLabel, Op: nmsync.OpAdd, Key: "a", To: "1"}
	override := nmsync.Change{Kind: nmsync.KindNodeLabel, Op: nmsync.OpOverride, Key: "b", From: "x", To: "2"}
	tests := map[string]struct {
		in   PoolResult
		want v1alpha1.MachinePoolSyncStatus
	}{
		"all in sync": {
			in: PoolResult{Cluster: "ns/c1", PoolName: "infra", Generation: 3, Results: []nmsync.Result{
				res("Machine", "m1", nmsync.OutcomeInSync), res("Node", "n1", nmsync.OutcomeInSync),
			}},
			want: v1alpha1.MachinePoolSyncStatus{Cluster: "c1", Pool: "infra", ObservedGeneration: 3, Phase: v1alpha1.PhaseInSync, Total: 2, Synced: 2},
		},
		"patched with an override, one Node not linked yet": {
			in: PoolResult{Cluster: "ns/c1", PoolName: "infra", Results: []nmsync.Result{
				res("Machine", "m1", nmsync.OutcomePatched, add, override), res("Node", "n1", nmsync.OutcomePatched, add),
				res("Machine", "m2", nmsync.OutcomeInSync), {Kind: "Node", Outcome: nmsync.OutcomeSkipped, Reason: nmsync.NodeSkipNoNodeRef},
			}},
			want: v1alpha1.MachinePoolSyncStatus{Cluster: "c1", Pool: "infra", Phase: v1alpha1.PhaseInSync, Total: 3, Synced: 3, Patched: 2, Skipped: 1, Overrides: 1},
		},
		"a failed Machine holds its Node back": {
			in: PoolResult{Cluster: "ns/c1", PoolName: "infra", Results: []nmsync.Result{
				{Kind: "Machine", Name: "m1", Outcome: nmsync.OutcomeFailed, Err: errors.New("boom"), Requests: 1},
				{Kind: "Node", Name: "n1", Outcome: nmsync.OutcomeSkipped, Reason: nmsync.ReasonMachineNotSynced},
			}},
			want: v1alpha1.MachinePoolSyncStatus{Cluster: "c1", Pool: "infra", Phase: v1alpha1.PhaseDrifted, Total: 2, Drifted: 2, Reason: "WriteFailed", Message: "Machine m1: boom"},
		},
		"dry run drift": {
			in: PoolResult{Cluster: "ns/c1", PoolName: "infra", DryRun: true, Results: []nmsync.Result{
				res("Machine", "m1", nmsync.OutcomeWouldPatch, add), res("Node", "n1", nmsync.OutcomeWouldPatch, add),
			}},
			want: v1alpha1.MachinePoolSyncStatus{Cluster: "c1", Pool: "infra", Phase: v1alpha1.PhaseDrifted, Total: 2, Drifted: 2, Reason: "DryRun"},
		},
		"a denial is named apart from transient failures": {
			in: PoolResult{Cluster: "ns/c1", PoolName: "infra", Results: []nmsync.Result{
				res("Machine", "m1", nmsync.OutcomeInSync),
				{Kind: "Node", Name: "n1", Outcome: nmsync.OutcomeFailed, Reason: nmsync.ReasonDenied, Err: errors.New("webhook says no"), Requests: 1},
			}},
			want: v1alpha1.MachinePoolSyncStatus{Cluster: "c1", Pool: "infra", Phase: v1alpha1.PhaseDrifted, Total: 2, Synced: 1, Drifted: 1, Reason: v1alpha1.ReasonWriteDenied,
				Message: "1 object(s) denied by the spoke, retried on a slow cadence; Node n1: webhook says no"},
		},
		"items ignored as Hive ignores them are in the message of an in-sync pool": {
			in: PoolResult{Cluster: "ns/c1", PoolName: "infra", Warnings: []string{"w1", "w2"}, Results: []nmsync.Result{
				res("Machine", "m1", nmsync.OutcomeInSync),
			}},
			want: v1alpha1.MachinePoolSyncStatus{Cluster: "c1", Pool: "infra", Phase: v1alpha1.PhaseInSync, Total: 1, Synced: 1, Message: "w1; w2"},
		},
		"refused keeps its reason and message": {
			in:   PoolResult{Cluster: "ns/c1", PoolName: "infra", Phase: v1alpha1.PhaseRefused, Reason: "ReservedKey", Message: "spec.labels[...]"},
			want: v1alpha1.MachinePoolSyncStatus{Cluster: "c1", Pool: "infra", Phase: v1alpha1.PhaseRefused, Reason: "ReservedKey", Message: "spec.labels[...]"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Status(tc.in)); diff != "" {
				t.Errorf("Status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChangeSummary(t *testing.T) {
	got := ChangeSummary([]nmsync.Result{
		res("Machine", "m1", nmsync.OutcomePatched, nmsync.Change{Kind: nmsync.KindTaint, Op: nmsync.OpUpdate, Key: "k:NoSchedule", From: "a", To: "b"}),
		res("Node", "n1", nmsync.OutcomePatched, nmsync.Change{Kind: nmsync.KindTaint, Op: nmsync.OpUpdate, Key: "k:NoSchedule", From: "a", To: "b"},
			nmsync.Change{Kind: nmsync.KindNodeLabel, Op: nmsync.OpRemove, Key: "x"}),
		res("Node", "n2", nmsync.OutcomeInSync),
	})
	want := `1 Machine, 1 Node: remove label x; update taint k:NoSchedule "a"->"b"`
	if got != want {
		t.Errorf("ChangeSummary = %q, want %q", got, want)
	}
	if got := ChangeSummary([]nmsync.Result{res("Node", "n2", nmsync.OutcomeInSync)}); got != "" {
		t.Errorf("ChangeSummary of nothing = %q", got)
	}
}

func TestShardIsStableAndSpread(t *testing.T) {
	layouts := map[string]func(name string) string{
		"one namespace":                       func(string) string { return "ns" },
		"a namespace named after the cluster": func(name string) string { return name }, // Hive's usual layout
	}
	for layout, namespace := range layouts {
		for _, n := range []int{2, 3, 4, 8} {
			counts := make([]int, n)
			for i := range 4000 {
				name := "cluster-" + string(rune('a'+i%26)) + "-" + time.Duration(i).String()
				s := Shard(namespace(name), name, n)
				if s != Shard(namespace(name), name, n) {
					t.Fatal("shard is not stable")
				}
				counts[s]++
			}
			for i, c := range counts {
				if want := 4000 / n; c < want*8/10 || c > want*12/10 {
					t.Errorf("%s, %d shards: shard %d holds %d of 4000 clusters: %v", layout, n, i, c, counts)
				}
			}
		}
	}
	if Shard("a", "b", 1) != 0 || Shard("a", "b", 0) != 0 {
		t.Error("one shard must be shard 0")
	}
}

func TestContestTracker(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newContestTracker(3, time.Minute, func() time.Time { return now })
	target := nmsync.Target{Machine: &machinev1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1"}}, Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
	patched := res("Node", "n1", nmsync.OutcomePatched, nmsync.Change{Op: nmsync.OpAdd})
	adopted := res("Node", "n1", nmsync.OutcomePatched, nmsync.Change{Op: nmsync.OpAdopt})
	for i := range 2 {
		if c.record("ns/c", "p", "v1", patched) {
			t.Fatalf("held after %d patches", i+1)
		}
		now = now.Add(10 * time.Second)
	}
	if c.record("ns/c", "p", "v1", adopted) {
		t.Fatal("an adoption counted as a fight")
	}
	if !c.record("ns/c", "p", "v1", patched) {
		t.Fatal("not held after 3 patches within the window")
	}
	if !c.isHeld("ns/c", "v1", target) {
		t.Fatal("target not held")
	}
	if d, ok := c.nextRelease("ns/c"); !ok || d != time.Minute {
		t.Errorf("nextRelease = %s %v, want the window (1m)", d, ok)
	}
	if c.isHeld("ns/c", "v2", target) {
		t.Fatal("held although the pool changed since: the new spec must be written")
	}
	if c.isHeld("ns/other", "v1", target) {
		t.Fatal("another cluster's object held")
	}
	// A new pool spec starts the count again.
	if c.record("ns/c", "p", "v2", res("Machine", "m9", nmsync.OutcomePatched, nmsync.Change{Op: nmsync.OpAdd})) {
		t.Fatal("held on the first patch of a new object")
	}
	now = now.Add(2 * time.Minute)
	if d, ok := c.nextRelease("ns/c"); ok {
		t.Errorf("nextRelease = %s after the hold ended: nothing to wake up for", d)
	}
	if c.isHeld("ns/c", "v1", target) {
		t.Fatal("still held after the window")
	}
	if c.record("ns/c", "p", "v1", patched) {
		t.Fatal("held again at once after release")
	}
	// Specs that alternate, where the object is only adopted under one of
	// them (nodelink copied the items first): the other's patches do not add up.
	for range 5 {
		now = now.Add(time.Second)
		if c.record("ns/c", "p", "B", patched) {
			t.Fatal("patches under B, each after an adoption under A, were taken for a fight")
		}
		c.record("ns/c", "p", "A", adopted)
	}
	for range 5 { // pool changes: every patch is for a new spec
		now = now.Add(time.Second)
		if c.record("ns/c", "p", now.String(), patched) {
			t.Fatal("patches for successive pool specs were taken for a fight")
		}
	}
}

func TestSameSummaryIgnoresTimesAndPatched(t *testing.T) {
	now := metav1.Now()
	a := v1alpha1.MachinePoolSyncStatus{Phase: v1alpha1.PhaseInSync, Total: 4, Synced: 4, Patched: 4, LastSyncTime: &now}
	b := a
	b.Patched, b.LastSyncTime, b.LastChangeTime = 0, nil, &now
	if !sameSummary(a, b) {
		t.Error("times and Patched must not count as a change")
	}
	b.Synced = 3
	if sameSummary(a, b) {
		t.Error("a different count must count as a change")
	}
}
