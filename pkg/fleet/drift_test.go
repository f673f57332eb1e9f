package fleet

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

	"github.com/google/go-cmp/cmp"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
