package fleet

import (
	"context"
	"fmt"
	"slices"
	"testing"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// TestListSpokeReadsOnlyThePoolsObjects guards listSpoke, which reads a
// pool's MachineSets, their Machines and those Machines' Nodes instead of
// every object of the spoke: the planner's targets must be exactly those
// it finds in the whole spoke, whatever else the spoke holds, and nothing
// outside them is read.
func TestListSpokeReadsOnlyThePoolsObjects(t *testing.T) {
	const ns = nmsync.MachineAPINamespace
	var objs []client.Object
	machineSet := func(name, pool string) *machinev1beta1.MachineSet {
		ms := &machinev1beta1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid")}}
		if pool != "" {
			ms.Labels = map[string]string{nmsync.LabelMachinePool: pool}
		}
		objs = append(objs, ms)
		return ms
	}
	// machine adds a Machine of ms (none: a control-plane Machine) named
	// name, whose nodeRef names node ("": none); with a Node of that name
	// unless the Node is missing, or another Machine's.
	machine := func(ms *machinev1beta1.MachineSet, name, node string, withNode bool) {
		m := &machinev1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if ms != nil {
			m.Labels = map[string]string{nmsync.LabelMachineSet: ms.Name}
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: machinev1beta1.GroupVersion.String(), Kind: "MachineSet",
				Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}}
		}
		if node != "" {
			m.Status.NodeRef = &corev1.ObjectReference{Kind: "Node", Name: node}
		}
		objs = append(objs, m)
		if withNode {
			objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
				Annotations: map[string]string{nmsync.AnnotationNodeMachine: ns + "/" + name}}})
		}
	}
	workers := machineSet("c-workers-a", "workers")
	machine(workers, "w-1", "n-w-1", true)
	machine(workers, "w-2", "n-w-2", false)          // its Node is gone
	machine(workers, "w-3", "", false)               // not provisioned yet
	machine(workers, "w-4", "n-w-1", false)          // names w-1's Node
	workersB := machineSet("c-workers-b", "workers") // a second zone
	machine(workersB, "wb-1", "n-wb-1", true)
	infra := machineSet("c-infra-a", "infra")
	machine(infra, "i-1", "n-i-1", true)
	// Labelled as a workers Machine, owned by no MachineSet: selected, and
	// then left out by the planner, as before.
	objs = append(objs, &machinev1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stray",
		Labels: map[string]string{nmsync.LabelMachineSet: workers.Name}}})
	// What the cluster's synced pools never need:
	machine(machineSet("c-other-a", "other"), "o-1", "n-o-1", true) // another pool's
	machine(machineSet("c-paused-a", "paused"), "p-1", "n-p-1", true)
	machine(machineSet("unmanaged", ""), "u-1", "n-u-1", true) // not Hive's
	machine(nil, "master-0", "n-master-0", true)               // the control plane's

	cd := &hivev1.ClusterDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: worldNS, Name: worldCD},
		Spec: hivev1.ClusterDeploymentSpec{Installed: true, ClusterMetadata: &hivev1.ClusterMetadata{
			AdminKubeconfigSecretRef: corev1.LocalObjectReference{Name: "c-admin-kubeconfig"}}},
		Status: hivev1.ClusterDeploymentStatus{Conditions: []hivev1.ClusterDeploymentCondition{
			{Type: hivev1.UnreachableCondition, Status: corev1.ConditionFalse}}},
	}
	pool := func(name string, mutate ...func(*hivev1.MachinePool)) hivev1.MachinePool {
		mp := hivev1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: worldNS, Name: worldCD + "-" + name, Generation: 1},
			Spec: hivev1.MachinePoolSpec{ClusterDeploymentRef: corev1.LocalObjectReference{Name: worldCD}, Name: name,
				Labels: map[string]string{labelKey: "a"}}}
		for _, m := range mutate {
			m(&mp)
		}
		return mp
	}
	pools := []hivev1.MachinePool{
		pool("infra"), pool("workers"),
		pool("paused", func(mp *hivev1.MachinePool) { mp.Annotations = map[string]string{nmsync.AnnotationPaused: "true"} }),
		pool("Not_A_Label_Value!"), // no MachineSet can carry it
	}
	d := Decide(cd, pools, false)
	if d.Desired[0] == nil || d.Desired[1] == nil || d.Desired[2] != nil {
		t.Fatalf("test set-up: want infra and workers synced and paused not, got %v", d.Desired)
	}

	spoke := newFakeSpoke(objs...)
	ctx := context.Background()
	var all SpokeObjects
	for _, l := range []client.ObjectList{&machinev1beta1.MachineSetList{}, &machinev1beta1.MachineList{}, &corev1.NodeList{}} {
		if err := spoke.List(ctx, l); err != nil {
			t.Fatal(err)
		}
		switch l := l.(type) {
		case *machinev1beta1.MachineSetList:
			all.MachineSets = l.Items
		case *machinev1beta1.MachineList:
			all.Machines = l.Items
		case *corev1.NodeList:
			all.Nodes = l.Items
		}
	}
	want := targetRows(d.Targets(all))
	if len(want) < 6 {
		t.Fatalf("test set-up: the whole spoke gives only %d targets: %v", len(want), want)
	}

	for _, byName := range []bool{true, false} {
		t.Run(fmt.Sprintf("nodesByName=%v", byName), func(t *testing.T) {
			objs, err := listSpoke(ctx, spoke, d, byName)
			if err != nil {
				t.Fatal(err)
			}
			if got := targetRows(d.Targets(objs)); !slices.Equal(got, want) {
				t.Errorf("targets from listSpoke\n%v\nwant (from the whole spoke)\n%v", got, want)
			}
			var read []string
			for i := range objs.MachineSets {
				read = append(read, "MachineSet/"+objs.MachineSets[i].Name)
			}
			for i := range objs.Machines {
				read = append(read, "Machine/"+objs.Machines[i].Name)
			}
			if byName {
				for i := range objs.Nodes {
					read = append(read, "Node/"+objs.Nodes[i].Name)
				}
			} else if len(objs.Nodes) != len(all.Nodes) {
				t.Errorf("listed %d Nodes, want all %d", len(objs.Nodes), len(all.Nodes))
			}
			slices.Sort(read)
			wantRead := []string{"Machine/i-1", "Machine/stray", "Machine/w-1", "Machine/w-2", "Machine/w-3", "Machine/w-4", "Machine/wb-1",
				"MachineSet/c-infra-a", "MachineSet/c-workers-a", "MachineSet/c-workers-b"}
			if byName {
				wantRead = append(wantRead, "Node/n-i-1", "Node/n-w-1", "Node/n-wb-1")
				slices.Sort(wantRead)
			}
			if !slices.Equal(read, wantRead) {
				t.Errorf("read\n%v\nwant\n%v", read, wantRead)
			}
		})
	}

	t.Run("no pool to sync reads nothing", func(t *testing.T) {
		none := Decide(cd, pools[2:3], false)
		objs, err := listSpoke(ctx, spoke, none, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs.MachineSets)+len(objs.Machines)+len(objs.Nodes) != 0 {
			t.Errorf("read %+v", objs)
		}
	})
}

// targetRows prints targets for comparison: pool, Machine, Node or why not.
func targetRows(targets [][]nmsync.Target) []string {
	var rows []string
	for _, ts := range targets {
		for _, t := range ts {
			node := "skip:" + t.NodeSkip
			if t.Node != nil {
				node = t.Node.Name
			}
			rows = append(rows, t.Pool+" "+t.Machine.Name+" "+node)
		}
	}
	return rows
}
