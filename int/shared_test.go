package int_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// An item someone else put on a Node stays when the pool that also declared
// it stops declaring it; what the pool delivered leaves. Each writer is its
// own field manager, as on a real spoke: kubelet registers the Nodes (with
// node-role.kubernetes.io/worker), machine-api's real nodelink links them and
// copies their Machines' labels, the MachineSet controller creates Machines
// from the template, and an admin labels one Node by hand.
func TestSharedItemsStayWhenThePoolDropsThem(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	const (
		role      = "node-role.kubernetes.io/worker"
		team      = "example.com/team"
		delivered = "example.com/delivered"
	)
	infraLabels := map[string]string{"node-role.kubernetes.io/infra": ""}
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "infra").WithLabels(infraLabels)); err != nil {
		t.Fatal(err)
	}
	runNodelink(t, ctx, s, 0)
	join := func(n int) []string {
		t.Helper()
		ms, err := s.ScaleUp(ctx, "infra", n)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range ms {
			node, err := s.JoinNode(ctx, m.Name)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, node.Name)
		}
		return names
	}
	nodes := join(3)
	waitFor(t, "nodelink links the registered Nodes", 30*time.Second, func() bool {
		got, _ := s.Nodes(ctx, "infra")
		return len(got) == 3 && nodesHold(ctx, s, "infra", hasLabel("node-role.kubernetes.io/infra", ""))
	})
	// An admin labels the first Node by hand with the value the pool will
	// declare; an earlier version of the controller had recorded kubelet's
	// role label as its own on the second (it adopted what it found).
	if err := s.Admin.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[0]}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+team+`":"a"}}}`)), client.FieldOwner("kubectl-label")); err != nil {
		t.Fatal(err)
	}
	if err := s.Admin.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[1]}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+nmsync.AnnotationOwnedLabels+`":"`+role+`"}}}`)), client.FieldOwner(nmsync.FieldManager)); err != nil {
		t.Fatal(err)
	}
	before := spokeSnapshot(t, ctx, s)

	r := startInSync(t, ctx, f, testOptions(), s)
	declared := map[string]string{"node-role.kubernetes.io/infra": "", role: "", team: "a", delivered: "yes"}
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels = maps.Clone(declared) }); err != nil {
		t.Fatal(err)
	}
	holdsAll := func(n corev1.Node) bool {
		for k, v := range declared {
			if !hasLabel(k, v)(n) {
				return false
			}
		}
		return true
	}
	waitFor(t, "the pool's labels on every Node", 30*time.Second, func() bool { return nodesHold(ctx, s, "infra", holdsAll) })
	// A Node born after the pool declared the labels: its Machine gets them
	// from the template, nodelink copies them, kubelet registers the role.
	late := join(1)[0]
	waitFor(t, "the late Node linked with the pool's labels", 30*time.Second, func() bool {
		got, _ := s.Nodes(ctx, "infra")
		return len(got) == 4 && nodesHold(ctx, s, "infra", holdsAll)
	})
	waitInSync(t, ctx, f, s, 30*time.Second)
	lateBefore := spokeSnapshot(t, ctx, s)["nodes/"+late]

	skip := auditLines(t, s)
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels = maps.Clone(infraLabels) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dropped labels gone where the pool delivered them", 30*time.Second, func() bool {
		return nodesHold(ctx, s, "infra", lacksLabel(delivered))
	})
	waitInSync(t, ctx, f, s, 30*time.Second)
	time.Sleep(2 * time.Second) // quiet: nothing more should come

	after := spokeSnapshot(t, ctx, s)
	want := maps.Clone(before)
	// What the pool still declares is there; the rest is as before the pool
	// declared it, on every Machine and Node that was there then.
	for k, v := range want {
		if strings.HasPrefix(k, "nodes/") {
			want[k] = v.withLabel("node-role.kubernetes.io/infra", "")
		}
	}
	// The late Node keeps what kubelet gave it and loses what the pool
	// delivered through nodelink; its Machine loses what the template gave it.
	want["nodes/"+late] = lateBefore.without(team, delivered)
	for k, v := range after {
		if _, ok := want[k]; !ok && strings.HasPrefix(k, "machines/") {
			want[k] = v // the late Machine: checked below
		}
	}
	for k := range want {
		if d := want[k].diff(after[k]); d != "" {
			t.Errorf("%s: %s", k, d)
		}
	}
	for k, v := range after {
		if !strings.HasPrefix(k, "machines/") {
			continue
		}
		for _, gone := range []string{role, team, delivered} {
			if _, ok := v.specLabels[gone]; ok {
				t.Errorf("%s: spec.metadata.labels still hold %s, which the pool delivered and dropped", k, gone)
			}
		}
	}
	for _, n := range []string{nodes[0], nodes[1], nodes[2], late} {
		if _, ok := after["nodes/"+n].labels[role]; !ok {
			t.Errorf("Node %s lost kubelet's %s", n, role)
		}
	}
	if _, ok := after["nodes/"+nodes[0]].labels[team]; !ok {
		t.Errorf("Node %s lost %s, set by hand before the pool declared it", nodes[0], team)
	}

	kept := testutil.ToFloat64(r.Metrics.SharedKept.WithLabelValues(nmsync.ResultKindNode))
	t.Logf("shared labels kept on Nodes: %v (hub_node_metadata_shared_items_kept_total)", kept)
	if kept < 5 { // the role on 4 Nodes, team on 1
		t.Errorf("shared_items_kept_total{kind=Node} = %v, want at least 5", kept)
	}
	evs := &eventsv1.EventList{}
	if err := f.Hub.Client.List(ctx, evs, client.InNamespace(s.Name)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		if strings.Contains(e.Note, "keep label "+role+" (also set by "+localfleet.KubeletFieldManager+")") {
			found = true
		}
	}
	if !found {
		t.Errorf("no Event says that %s was kept as kubelet's", role)
	}
	reads, writes, conflicts := 0, 0, 0
	for _, e := range readAudit(t, s.AuditLogPath)[skip:] {
		if e.User.Username == localfleet.NodelinkUser || e.ObjectRef.Subresource != "" {
			continue
		}
		switch {
		case e.Verb == "get" && (e.ObjectRef.Resource == "nodes" || e.ObjectRef.Resource == "machines"):
			reads++
		case e.Verb == "patch" && e.ResponseStatus.Code == 409:
			conflicts++
		case e.Verb == "patch":
			writes++
		}
	}
	t.Logf("dropping the labels from 4 Machines and 4 Nodes: %d reads, %d writes, %d conflicts by the hub", reads, writes, conflicts)
	if reads > 8+conflicts || writes > 8 {
		t.Errorf("dropping the labels took %d reads and %d writes (%d conflicts) for 8 objects, want one of each an object, and a read a conflict", reads, writes, conflicts)
	}
	assertAllowedAudit(t, s)
}

// objectItems is what a test compares of a Machine or a Node: its labels,
// its node labels (a Machine's spec.metadata.labels), its taints and its
// annotations other than this controller's records.
type objectItems struct {
	labels, specLabels, annotations map[string]string
	taints                          []string
}

func (o objectItems) withLabel(k, v string) objectItems {
	o.labels = maps.Clone(o.labels)
	o.labels[k] = v
	return o
}

func (o objectItems) without(keys ...string) objectItems {
	o.labels = maps.Clone(o.labels)
	for _, k := range keys {
		delete(o.labels, k)
	}
	return o
}

func (o objectItems) diff(got objectItems) string {
	if w, g := fmt.Sprint(o), fmt.Sprint(got); w != g {
		return fmt.Sprintf("want %s\n got %s", w, g)
	}
	return ""
}

// spokeSnapshot reads every Machine and Node of the spoke's infra pool.
func spokeSnapshot(t *testing.T, ctx context.Context, s *localfleet.Spoke) map[string]objectItems {
	t.Helper()
	out := map[string]objectItems{}
	foreign := func(a map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range a {
			if !strings.HasPrefix(k, nmsync.KeyPrefix) {
				out[k] = v
			}
		}
		return out
	}
	taints := func(ts []corev1.Taint) []string {
		var out []string
		for _, x := range ts {
			out = append(out, x.Key+"="+x.Value+":"+string(x.Effect))
		}
		return out
	}
	machines, err := s.Machines(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range machines {
		out["machines/"+m.Name] = objectItems{labels: m.Labels, specLabels: m.Spec.ObjectMeta.Labels, annotations: foreign(m.Annotations), taints: taints(m.Spec.Taints)}
	}
	nodes, err := s.Nodes(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		out["nodes/"+n.Name] = objectItems{labels: n.Labels, annotations: foreign(n.Annotations), taints: taints(n.Spec.Taints)}
	}
	return out
}

// TestTemplateItemsDroppedBeforeRecorded: the controller delivers a pool's
// label, machine label and taint, and stops (no replica leads). A Machine
// created from the template then holds them, and nodelink copies them onto
// its Node; the pool drops them before a controller first sees the Machine,
// so its record never names them. They are the pool's (its status says it
// dropped them, the template delivered them and no one touched them since),
// and go from the Machine and the Node; what others set on them stays, and
// so does what the installer keeps in the template (an edge pool's role
// label and taint). Found by the robustness suite (seed 345968420).
func TestTemplateItemsDroppedBeforeRecorded(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 1)
	runNodelink(t, ctx, s, 0)
	const key = "example.com/late"
	late := localfleet.Taint(key, "1", corev1.TaintEffectNoSchedule)
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
		spec.Labels[key] = "1"
		spec.MachineLabels = map[string]string{key: "1"}
		spec.Taints = append(spec.Taints, late)
	}); err != nil {
		t.Fatal(err)
	}
	const edge = "node-role.kubernetes.io/edge"
	edgeTaint := localfleet.Taint(edge, "", corev1.TaintEffectNoSchedule)
	installerItems := func() {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ms := &machinev1beta1.MachineSet{}
			if err := s.Admin.Get(ctx, client.ObjectKey{Namespace: nmsync.MachineAPINamespace, Name: s.InfraID + "-infra-" + localfleet.Zone}, ms); err != nil {
				return err
			}
			tmpl := &ms.Spec.Template.Spec
			if tmpl.ObjectMeta.Labels == nil {
				tmpl.ObjectMeta.Labels = map[string]string{}
			}
			tmpl.ObjectMeta.Labels[edge] = ""
			tmpl.Taints = append(tmpl.Taints, edgeTaint)
			return s.Admin.Update(ctx, ms)
		}); err != nil {
			t.Fatal(err)
		}
	}
	installerItems()
	_, stop := startStoppable(t, ctx, controllerConfig(t, ctx, f), testOptions())
	waitInSync(t, ctx, f, s, time.Minute)
	stop()
	if st, err := poolSync(ctx, f.Hub.Client, s, "infra"); err != nil || !slices.Contains(st.Status.Declared, "taint/"+key+":NoSchedule=1") {
		t.Fatalf("the status does not say the pool declared the taint (%v): %v", err, st.Status.Declared)
	}
	added, err := s.ScaleUp(ctx, "infra", 1)
	if err != nil {
		t.Fatal(err)
	}
	node, err := s.JoinNode(ctx, added[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	copied := func() bool {
		n := &corev1.Node{}
		return s.Admin.Get(ctx, client.ObjectKeyFromObject(node), n) == nil && hasLabel(key, "1")(*n) && hasTaint(key, "1", corev1.TaintEffectNoSchedule)(*n)
	}
	waitFor(t, "nodelink copies the template's items onto the new Node", time.Minute, copied)
	// Someone else's items on the same objects.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &machinev1beta1.Machine{}
		if err := s.Admin.Get(ctx, client.ObjectKeyFromObject(added[0]), m); err != nil {
			return err
		}
		m.Labels["example.com/by-hand"] = "1"
		return s.Admin.Update(ctx, m, client.FieldOwner("kubectl-label"))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
		delete(spec.Labels, key)
		spec.MachineLabels = nil
		spec.Taints = slices.DeleteFunc(spec.Taints, func(x corev1.Taint) bool { return x.Key == key })
	}); err != nil {
		t.Fatal(err)
	}
	installerItems() // the pool's new template, as the installer made it

	startInSync(t, ctx, f, testOptions(), s)
	waitFor(t, "the dropped items leave the new Machine and its Node", time.Minute, func() bool {
		m, n := &machinev1beta1.Machine{}, &corev1.Node{}
		if s.Admin.Get(ctx, client.ObjectKeyFromObject(added[0]), m) != nil || s.Admin.Get(ctx, client.ObjectKeyFromObject(node), n) != nil {
			return false
		}
		_, machineLabel := m.Labels[key]
		_, nodeLabel := m.Spec.ObjectMeta.Labels[key]
		machineTaint := slices.ContainsFunc(m.Spec.Taints, func(x corev1.Taint) bool { return x.Key == key })
		return !machineLabel && !nodeLabel && !machineTaint && lacksLabel(key)(*n) && !hasTaint(key, "1", corev1.TaintEffectNoSchedule)(*n)
	})
	m := &machinev1beta1.Machine{}
	if err := s.Admin.Get(ctx, client.ObjectKeyFromObject(added[0]), m); err != nil {
		t.Fatal(err)
	}
	if m.Labels["example.com/by-hand"] != "1" || m.Labels[nmsync.LabelMachineSet] == "" {
		t.Errorf("the Machine lost a label that is not the pool's: %v", m.Labels)
	}
	// The status is written after the sync's spoke writes, so it can lag the objects.
	if _, ok := poll(ctx, pollInterval, 30*time.Second, func() bool {
		st, err := poolSync(ctx, f.Hub.Client, s, "infra")
		return err == nil && slices.ContainsFunc(st.Status.Dropped, func(d v1alpha1.DroppedItem) bool { return d.Item == "taint/"+key+":NoSchedule=1" })
	}); !ok {
		st, err := poolSync(ctx, f.Hub.Client, s, "infra")
		t.Errorf("the status does not say the pool dropped the taint within 30 s (%v): %v", err, st.Status.Dropped)
	}
	n := &corev1.Node{}
	if err := s.Admin.Get(ctx, client.ObjectKeyFromObject(node), n); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Spec.ObjectMeta.Labels[edge]; !ok || !slices.ContainsFunc(m.Spec.Taints, func(x corev1.Taint) bool { return x.Key == edge }) ||
		!hasLabel(edge, "")(*n) || !hasTaint(edge, "", corev1.TaintEffectNoSchedule)(*n) {
		t.Errorf("the installer's template items left: Machine %v %v, Node %v %v", m.Spec.ObjectMeta.Labels, m.Spec.Taints, n.Labels, n.Spec.Taints)
	}
}
