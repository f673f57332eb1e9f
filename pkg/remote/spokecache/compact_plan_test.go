package spokecache

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// The compact records must keep every field the planner reads: for random
// spokes (objects full of fields nobody reads, and of every field someone
// does), mapping a pool to its targets, planning each Machine and Node, and
// reading a paced rollout's progress give the same answers from the cache's
// objects as from the full ones. A field dropped from the records, or one the
// planner starts to read without the records keeping it, fails here.
func TestCompactPlansAsFullObjects(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		ms, machines, nodes := randomSpoke(rng)
		// Machines come as JSON: compare with what a full decode gives (a zero timeAdded
		// is sent as null, so it arrives as nil).
		machines = throughJSON(t, machines)
		cms, cmachines, cnodes := machineSetsThroughRecords(t, ms), machinesThroughRecords(t, machines), throughRecords(t, nodes)
		d := randomDesired(rng)

		full := nmsync.Targets("pool", ms, machines, nodes)
		cached := nmsync.Targets("pool", cms, cmachines, cnodes)
		if diff := cmp.Diff(describeTargets(full), describeTargets(cached)); diff != "" {
			t.Fatalf("seed %d: targets differ (-full +cached):\n%s", seed, diff)
		}
		for i := range full {
			f, c := full[i], cached[i]
			if fp, cp := nmsync.PlanMachine(d, f.Machine), nmsync.PlanMachine(d, c.Machine); string(fp.Patch) != string(cp.Patch) || !cmp.Equal(fp.Changes, cp.Changes) {
				t.Fatalf("seed %d: Machine %s plans differ:\nfull   %s %v\ncached %s %v", seed, f.Machine.Name, fp.Patch, fp.Changes, cp.Patch, cp.Changes)
			}
			if f.Node != nil {
				if fp, cp := nmsync.PlanNode(d, f.Node), nmsync.PlanNode(d, c.Node); string(fp.Patch) != string(cp.Patch) || !cmp.Equal(fp.Changes, cp.Changes) {
					t.Fatalf("seed %d: Node %s plans differ:\nfull   %s %v\ncached %s %v", seed, f.Node.Name, fp.Patch, fp.Changes, cp.Patch, cp.Changes)
				}
			}
			if fp, cp := nmsync.ProgressOf(d, f), nmsync.ProgressOf(d, c); fp != cp {
				t.Fatalf("seed %d: Machine %s progress %v from the full objects, %v from the cache", seed, f.Machine.Name, fp, cp)
			}
		}
	}
}

// throughRecords returns the objects as the spoke cache serves them.
func throughRecords[T any](t *testing.T, in []T) []T {
	t.Helper()
	recs := make([]*record, len(in))
	for i := range in {
		r, err := compact(any(&in[i]))
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = r
	}
	return servedFrom(recs, func(r *record) T { return *(expand(r, any(new(T))).(*T)) })
}

// servedFrom returns what the cache serves from recs.
func servedFrom[T any](recs []*record, as func(*record) T) []T {
	out := make([]T, len(recs))
	for i, r := range recs {
		out[i] = as(r)
	}
	return out
}

func throughJSON[T any](t *testing.T, in []T) []T {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// machinesThroughRecords returns the Machines as the spoke cache serves them: it
// decodes their JSON as machineJSON (in a list) before keeping a record.
func machinesThroughRecords(t *testing.T, in []machinev1beta1.Machine) []machinev1beta1.Machine {
	t.Helper()
	body, err := json.Marshal(&machinev1beta1.MachineList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: in})
	if err != nil {
		t.Fatal(err)
	}
	items, rv, err := decodeMachineList(body)
	if err != nil || rv != "7" || len(items) != len(in) {
		t.Fatalf("decodeMachineList = %d items, rv %q, %v", len(items), rv, err)
	}
	recs := make([]*record, len(items))
	for i := range items {
		r, err := compact(items[i])
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = r
	}
	return servedFrom(recs, (*record).asMachine)
}

// machineSetsThroughRecords returns the MachineSets as the spoke cache serves
// them: it watches their metadata only (PartialObjectMetadata).
func machineSetsThroughRecords(t *testing.T, in []machinev1beta1.MachineSet) []machinev1beta1.MachineSet {
	t.Helper()
	recs := make([]*record, len(in))
	for i := range in {
		r, err := compact(&metav1.PartialObjectMetadata{ObjectMeta: *in[i].ObjectMeta.DeepCopy()})
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = r
	}
	return servedFrom(recs, (*record).asMachineSet)
}

func describeTargets(ts []nmsync.Target) []string {
	var out []string
	for _, t := range ts {
		node := "-"
		if t.Node != nil {
			node = t.Node.Name
		}
		out = append(out, fmt.Sprintf("%s %s %s %s", t.Pool, t.Machine.Name, node, t.NodeSkip))
	}
	return out
}

// Random values drawn from small sets, so that pools, objects and owned
// records meet often.
var (
	someKeys   = []string{"example.com/team", "example.com/tier", "node-role.kubernetes.io/infra", "foreign.example.com/x"}
	someValues = []string{"", "a", "b"}
	someEffect = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
)

func pick[T any](rng *rand.Rand, from []T) T { return from[rng.IntN(len(from))] }

func randomLabels(rng *rand.Rand) map[string]string {
	out := map[string]string{}
	for range rng.IntN(4) {
		out[pick(rng, someKeys)] = pick(rng, someValues)
	}
	return out
}

func randomTaints(rng *rand.Rand) []corev1.Taint {
	var out []corev1.Taint
	for range rng.IntN(4) {
		t := corev1.Taint{Key: pick(rng, someKeys), Value: pick(rng, someValues), Effect: pick(rng, someEffect)}
		switch rng.IntN(4) {
		case 0:
			t.TimeAdded = &metav1.Time{}
		case 1:
			t.TimeAdded = &metav1.Time{Time: time.Unix(1_700_000_000+rng.Int64N(1e6), 0).Local()}
		}
		out = append(out, t)
	}
	return out
}

// randomOwned is a random owned-* record, sometimes absent, sometimes junk.
func randomOwned(rng *rand.Rand, annotations map[string]string) {
	for _, key := range []string{nmsync.AnnotationOwnedLabels, nmsync.AnnotationOwnedTaints, nmsync.AnnotationOwnedMachineLabels} {
		switch rng.IntN(4) {
		case 0:
		case 1:
			annotations[key] = pick(rng, someKeys)
		case 2:
			annotations[key] = pick(rng, someKeys) + ":" + string(pick(rng, someEffect)) + "," + pick(rng, someKeys)
		default:
			annotations[key] = ",,bad"
		}
	}
}

func randomDesired(rng *rand.Rand) nmsync.Desired {
	d := nmsync.Desired{Labels: randomLabels(rng), MachineLabels: randomLabels(rng)}
	seen := map[string]bool{}
	for _, t := range randomTaints(rng) {
		if id := t.Key + ":" + string(t.Effect); !seen[id] {
			seen[id] = true
			d.Taints = append(d.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
	}
	if len(d.Taints) > 0 && rng.IntN(2) == 0 {
		d.Deferred = map[string]bool{d.Taints[0].Key + ":" + string(d.Taints[0].Effect): true}
	}
	return d
}

// randomSpoke is two MachineSets (one the pool's), Machines of each and of
// nobody, and Nodes linked to them or not, with every field the planner
// reads varied and many it does not read filled.
func randomSpoke(rng *rand.Rand) ([]machinev1beta1.MachineSet, []machinev1beta1.Machine, []corev1.Node) {
	raw := &runtime.RawExtension{Raw: []byte(`{"instanceType":"m5.xlarge"}`)}
	var sets []machinev1beta1.MachineSet
	for i, pool := range []string{"pool", "other"} {
		sets = append(sets, machinev1beta1.MachineSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: nmsync.MachineAPINamespace, Name: fmt.Sprintf("ms-%d", i), UID: types.UID(fmt.Sprintf("ms-uid-%d", i)),
				Labels: map[string]string{nmsync.LabelMachinePool: pool}, Annotations: map[string]string{"a": "1"}},
			Spec: machinev1beta1.MachineSetSpec{Replicas: ptr.To[int32](3), Template: machinev1beta1.MachineTemplateSpec{
				Spec: machinev1beta1.MachineSpec{ProviderSpec: machinev1beta1.ProviderSpec{Value: raw}}}},
		})
	}
	var machines []machinev1beta1.Machine
	var nodes []corev1.Node
	for i := range 6 {
		name := fmt.Sprintf("m-%d", i)
		ms := sets[rng.IntN(len(sets))]
		m := machinev1beta1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: nmsync.MachineAPINamespace, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "5",
				Labels:      map[string]string{nmsync.LabelMachineSet: ms.Name},
				Annotations: map[string]string{"foreign": "x"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet",
					Name: ms.Name, UID: ms.UID, Controller: ptr.To(rng.IntN(5) > 0)}},
			},
			Spec: machinev1beta1.MachineSpec{
				ObjectMeta:   machinev1beta1.ObjectMeta{Labels: randomLabels(rng)},
				Taints:       randomTaints(rng),
				ProviderSpec: machinev1beta1.ProviderSpec{Value: raw},
			},
			Status: machinev1beta1.MachineStatus{ProviderStatus: raw, Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}},
		}
		for k, v := range randomLabels(rng) {
			m.Labels[k] = v
		}
		randomOwned(rng, m.Annotations)
		if rng.IntN(4) > 0 {
			m.Spec.ProviderID = ptr.To(fmt.Sprintf("aws:///i-%d", i))
		}
		if rng.IntN(5) > 0 {
			m.Status.Phase = ptr.To(pick(rng, []string{"Running", "Provisioning", "Failed"}))
		}
		if rng.IntN(8) == 0 {
			m.DeletionTimestamp = &metav1.Time{}
		}
		node := corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "node-" + name, UID: types.UID("node-uid-" + name), ResourceVersion: "9",
				Labels:      randomLabels(rng),
				Annotations: map[string]string{"k8s.ovn.org/node-subnets": "{...}"}},
			Spec: corev1.NodeSpec{Taints: randomTaints(rng), PodCIDR: "10.128.0.0/23"},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
				Images: []corev1.ContainerImage{{Names: []string{"quay.io/x"}, SizeBytes: 1}}},
		}
		randomOwned(rng, node.Annotations)
		switch rng.IntN(6) {
		case 0: // not linked yet
		case 1:
			m.Status.NodeRef = &corev1.ObjectReference{Kind: "Node", Name: "node-nowhere"}
		default:
			m.Status.NodeRef = &corev1.ObjectReference{Kind: "Node", Name: node.Name, UID: node.UID}
		}
		switch rng.IntN(5) {
		case 0: // nodelink has not annotated it yet
		case 1:
			node.Annotations[nmsync.AnnotationNodeMachine] = nmsync.MachineAPINamespace + "/someone-else"
		default:
			node.Annotations[nmsync.AnnotationNodeMachine] = nmsync.MachineAPINamespace + "/" + name
		}
		switch rng.IntN(4) {
		case 0:
		case 1:
			node.Spec.ProviderID = "aws:///i-other"
		default:
			node.Spec.ProviderID = fmt.Sprintf("aws:///i-%d", i)
		}
		if rng.IntN(10) == 0 {
			node.DeletionTimestamp = &metav1.Time{}
		}
		machines = append(machines, m)
		nodes = append(nodes, node)
	}
	return sets, machines, nodes
}
