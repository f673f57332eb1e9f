package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

	"github.com/google/go-cmp/cmp"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// The drift report plans as the controller does, and writes nothing.
func TestDriftOfCluster(t *testing.T) {
	w := newWorld(t, 2, Options{}, func(_ *hivev1.ClusterDeployment, _ *hivev1.MachinePool, objs []client.Object) {
		setLabel(objs[1], labelKey, "old") // one Machine holds another value
	})
	pools := &hivev1.MachinePoolList{}
	if err := w.hub.List(context.Background(), pools); err != nil {
		t.Fatal(err)
	}
	dialled := 0
	dial := func(context.Context, *hivev1.ClusterDeployment) (client.Reader, func(), error) {
		dialled++
		return w.spoke, func() {}, nil
	}
	rows := driftOfCluster(context.Background(), dial, w.cd, pools.Items)
	want := []DriftRow{{Cluster: "ns/c", Pool: "c-workers", State: "Drifted", Machines: 2, Nodes: 2, DriftedMachines: 2, DriftedNodes: 2,
		Changes: []string{"add label example.com/team=a", `override label example.com/team "old"->"a" (set by someone else)`}}}
	if diff := cmp.Diff(want, rows, cmpIgnoreMessage()); diff != "" {
		t.Errorf("drift (-want +got):\n%s", diff)
	}
	if dialled != 1 || w.spoke.patchCount() != 0 {
		t.Errorf("dialled %d times, %d patches; want 1 and 0", dialled, w.spoke.patchCount())
	}

	unreachable := func(context.Context, *hivev1.ClusterDeployment) (client.Reader, func(), error) {
		return nil, nil, errors.New("dial tcp: i/o timeout")
	}
	rows = driftOfCluster(context.Background(), unreachable, w.cd, pools.Items)
	if len(rows) != 1 || rows[0].State != "Unreachable" {
		t.Errorf("an unreachable spoke: %+v", rows)
	}
	w.cd.Annotations = map[string]string{nmsync.AnnotationPaused: "true"}
	if rows = driftOfCluster(context.Background(), unreachable, w.cd, pools.Items); len(rows) != 1 || rows[0].State != "Paused" {
		t.Errorf("a paused cluster: %+v", rows)
	}
	if rows = driftOfCluster(context.Background(), unreachable, w.cd, nil); rows != nil {
		t.Errorf("a cluster without pools has rows: %+v", rows)
	}
}

func cmpIgnoreMessage() cmp.Option {
	return cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Message" }, cmp.Ignore())
}

func TestWriteDrift(t *testing.T) {
	rows := []DriftRow{
		{Cluster: "ns/c", Pool: "c-workers", State: "Drifted", Machines: 2, DriftedMachines: 1, Changes: []string{"a=1", strings.Repeat("x", 200)}},
		{Cluster: "ns/d", Pool: "d-workers", State: "RollingOut", PendingNoExecute: "k=v:NoExecute", PendingNodes: 3},
		{Cluster: "ns/e", Pool: "e-workers", State: "Unreachable", Reason: string(remote.ReasonTimeout), Message: "no answer"},
	}
	var table, js bytes.Buffer
	if err := WriteDrift(&table, rows, "table"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CLUSTER", "ns/c", "...", "paced NoExecute k=v:NoExecute pending on 3 Node(s)", "no answer"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if err := WriteDrift(&js, nil, "json"); err != nil || strings.TrimSpace(js.String()) != "[]" {
		t.Errorf("json of no rows = %q, %v", js.String(), err)
	}
	if err := WriteDrift(&js, rows, "yaml"); err == nil {
		t.Errorf("an unknown output is not refused")
	}
}

// The drift report reads its shard's clusters alone, as that shard's controller
// does, and refuses a shard outside the count.
func TestDriftReportReadsItsShardAlone(t *testing.T) {
	ctx := context.Background()
	var objs []client.Object
	for i := range 12 {
		ns := fmt.Sprintf("ns-%d", i)
		// Paused: the report plans nothing and dials no spoke.
		objs = append(objs, &hivev1.ClusterDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c",
			Annotations: map[string]string{nmsync.AnnotationPaused: "true"}}},
			&hivev1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c-workers"},
				Spec: hivev1.MachinePoolSpec{ClusterDeploymentRef: corev1.LocalObjectReference{Name: "c"}, Name: "workers"}})
	}
	hub := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).Build()
	seen := map[string]bool{}
	for _, o := range []Options{{}, {ShardCount: 3, ShardIndex: 0}, {ShardCount: 3, ShardIndex: 1}, {ShardCount: 3, ShardIndex: 2}} {
		rows, err := DriftReport(ctx, hub, hub, o, 2)
		if err != nil {
			t.Fatalf("%d/%d: %v", o.ShardIndex, o.ShardCount, err)
		}
		var want, got []string
		for i := range 12 {
			if ns := fmt.Sprintf("ns-%d", i); o.InShard(ns, "c") {
				want = append(want, ns+"/c")
			}
		}
		for _, r := range rows {
			got = append(got, r.Cluster)
			if o.ShardCount > 1 {
				seen[r.Cluster] = true
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("shard %d of %d: rows for %v, want %v", o.ShardIndex, o.ShardCount, got, want)
		}
		if o.ShardCount == 0 && len(got) != 12 {
			t.Errorf("no shard set: %d clusters, want all 12", len(got))
		}
	}
	if len(seen) != 12 {
		t.Errorf("the three shards together report %d clusters, want 12", len(seen))
	}
	if _, err := DriftReport(ctx, hub, hub, Options{ShardCount: 3, ShardIndex: 3}, 2); err == nil || !strings.Contains(err.Error(), "--shard-index=3") {
		t.Errorf("shard 3 of 3: %v, want it refused", err)
	}
}
