package int_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// testOptions makes the controller quick to notice in tests, and sets the
// safety-net resync far away so that only watches can explain a reaction.
func testOptions() fleet.Options {
	return fleet.Options{
		ResyncPeriod: time.Hour,
		SyncTimeout:  30 * time.Second,
		Remote: remote.Options{
			ProbeInterval:  time.Second,
			RequestTimeout: 5 * time.Second,
			ConnectTimeout: 15 * time.Second,
			BackoffBase:    200 * time.Millisecond,
			BackoffCap:     2 * time.Second,
			// Notice rewritten Secrets quickly (production: 1m).
			SecretRecheckInterval: time.Second,
		},
	}
}

// startController runs the controller against the hub with cfg until the
// test ends, through the same setup as cmd/hub-controller.
func startController(t *testing.T, ctx context.Context, cfg *rest.Config, opts fleet.Options) *fleet.Reconciler {
	t.Helper()
	r, stop := startStoppable(t, ctx, cfg, opts)
	t.Cleanup(stop)
	return r
}

// startStoppable is startController with a stop, which returns once the
// controller has stopped; the test must call it.
func startStoppable(t *testing.T, ctx context.Context, cfg *rest.Config, opts fleet.Options) (*fleet.Reconciler, func()) {
	t.Helper()
	if so := shardOptions(t); opts.ShardCount == 0 {
		opts.ShardCount, opts.ShardIndex = so.ShardCount, so.ShardIndex
	}
	mgr, r, err := fleet.NewManager(cfg, fleet.ManagerConfig{MetricsAddr: "0", ProbeAddr: "0"}, opts)
	if err != nil {
		t.Fatalf("new manager: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return r, sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("manager did not stop within 30s")
		}
	})
}

// startInSync runs the controller with opts as itself (startController,
// controllerConfig) and waits, a minute each, until the infra pool of each
// of spokes is InSync.
func startInSync(t *testing.T, ctx context.Context, f *localfleet.Fleet, opts fleet.Options, spokes ...*localfleet.Spoke) *fleet.Reconciler {
	t.Helper()
	r := startController(t, ctx, controllerConfig(t, ctx, f), opts)
	for _, s := range spokes {
		waitInSync(t, ctx, f, s, time.Minute)
	}
	return r
}

// poolSync reads a pool's MachinePoolSync.
func poolSync(ctx context.Context, c client.Client, s *localfleet.Spoke, pool string) (*v1alpha1.MachinePoolSync, error) {
	st := &v1alpha1.MachinePoolSync{}
	err := c.Get(ctx, types.NamespacedName{Namespace: s.Name, Name: s.Name + "-" + pool}, st)
	return st, err
}

// nodesHold reports whether every Node of the pool has the label k=v (or
// lacks k when v is empty and absent is true).
func nodesHold(ctx context.Context, s *localfleet.Spoke, pool string, check func(corev1.Node) bool) bool {
	nodes, err := s.Nodes(ctx, pool)
	if err != nil || len(nodes) == 0 {
		return false
	}
	for _, n := range nodes {
		if !check(n) {
			return false
		}
	}
	return true
}

func hasLabel(k, v string) func(corev1.Node) bool {
	return func(n corev1.Node) bool { got, ok := n.Labels[k]; return ok && got == v }
}

func lacksLabel(k string) func(corev1.Node) bool {
	return func(n corev1.Node) bool { _, ok := n.Labels[k]; return !ok }
}

func hasTaint(k, v string, e corev1.TaintEffect) func(corev1.Node) bool {
	return func(n corev1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == k && t.Value == v && t.Effect == e })
	}
}

// waitInSync waits until the infra pool of s reports InSync.
func waitInSync(t *testing.T, ctx context.Context, f *localfleet.Fleet, s *localfleet.Spoke, timeout time.Duration) {
	t.Helper()
	waitFor(t, s.Name+" infra InSync", timeout, func() bool { p, _ := poolReason(ctx, f.Hub.Client, s); return p == v1alpha1.PhaseInSync })
}

func addInfraPool(t *testing.T, ctx context.Context, s *localfleet.Spoke, replicas int) {
	t.Helper()
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "infra").
		WithReplicas(replicas).
		WithLabels(map[string]string{"node-role.kubernetes.io/infra": ""}).
		WithTaints(localfleet.Taint("node-role.kubernetes.io/infra", "reserved", corev1.TaintEffectNoSchedule))); err != nil {
		t.Fatal(err)
	}
}

func TestControllerEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 6*time.Minute)
	f := startFleet(t, ctx, 3)
	for _, s := range f.Spokes() {
		addInfraPool(t, ctx, s, 3)
	}
	cfg := controllerConfig(t, ctx, f)
	startController(t, ctx, cfg, testOptions())
	hub := f.Hub.Client

	for _, s := range f.Spokes() {
		waitFor(t, s.Name+" pool InSync", time.Minute, func() bool {
			st, err := poolSync(ctx, hub, s, "infra")
			return err == nil && st.Status.Phase == v1alpha1.PhaseInSync && st.Status.Total == 6
		})
	}

	s1 := f.Spokes()[0]
	userMachine, userNode := addUnmanagedMachine(t, ctx, s1, "infra")
	// A pool change: add a label and a machine label, change a taint's value.
	if _, err := s1.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
		spec.Labels["example.com/tier"] = "gold"
		spec.MachineLabels = map[string]string{"example.com/owner": "sre"}
		spec.Taints[0].Value = "dedicated"
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pool change reaches every Node", 30*time.Second, func() bool {
		return nodesHold(ctx, s1, "infra", func(n corev1.Node) bool {
			return hasLabel("example.com/tier", "gold")(n) && hasTaint("node-role.kubernetes.io/infra", "dedicated", corev1.TaintEffectNoSchedule)(n)
		})
	})
	machines, err := s1.Machines(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range machines {
		if m.Labels["example.com/owner"] != "sre" || m.Spec.Labels["example.com/tier"] != "gold" {
			t.Errorf("Machine %s not updated: labels %v spec labels %v", m.Name, m.Labels, m.Spec.Labels)
		}
	}

	// A MachineSet Hive does not manage (no hive.openshift.io/machine-pool label), though its
	// Machine and Node look like the pool's, is never read nor written.
	um, un := &machinev1beta1.Machine{}, &corev1.Node{}
	if err := s1.Admin.Get(ctx, types.NamespacedName{Namespace: localfleet.MachineAPINamespace, Name: userMachine}, um); err != nil {
		t.Fatal(err)
	}
	if err := s1.Admin.Get(ctx, types.NamespacedName{Name: userNode}, un); err != nil {
		t.Fatal(err)
	}
	if _, ok := um.Labels["example.com/owner"]; ok || len(ownedAnnotations(um.Annotations)) > 0 {
		t.Errorf("unmanaged Machine %s was written: labels %v annotations %v", um.Name, um.Labels, um.Annotations)
	}
	if _, ok := un.Labels["example.com/tier"]; ok || len(ownedAnnotations(un.Annotations)) > 0 ||
		!hasTaint("node-role.kubernetes.io/infra", "reserved", corev1.TaintEffectNoSchedule)(*un) {
		t.Errorf("unmanaged Node %s was written: labels %v annotations %v taints %v", un.Name, un.Labels, un.Annotations, un.Spec.Taints)
	}

	// Removal of a label the controller applied.
	if _, err := s1.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { delete(spec.Labels, "example.com/tier") }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "label removal reaches every Node", 30*time.Second, func() bool {
		return nodesHold(ctx, s1, "infra", lacksLabel("example.com/tier"))
	})

	// A scale-up: a new Machine, later its Node.
	added, err := s1.ScaleUp(ctx, "infra", 1)
	if err != nil {
		t.Fatal(err)
	}
	node, err := s1.LinkNode(ctx, added[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	// The Node was made from the Machine's template copy (old taint value);
	// the controller must fix it.
	waitFor(t, "new Node gets the pool's metadata", 30*time.Second, func() bool {
		n := corev1.Node{}
		return s1.Admin.Get(ctx, types.NamespacedName{Name: node.Name}, &n) == nil &&
			hasTaint("node-role.kubernetes.io/infra", "dedicated", corev1.TaintEffectNoSchedule)(n) &&
			hasLabel("node-role.kubernetes.io/infra", "")(n)
	})

	// Out-of-band drift: someone removes the pool label from a Node.
	victim := node.Name
	if err := s1.RemoveNodeLabel(ctx, victim, "node-role.kubernetes.io/infra"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "out-of-band removal repaired", 30*time.Second, func() bool {
		n := corev1.Node{}
		return s1.Admin.Get(ctx, types.NamespacedName{Name: victim}, &n) == nil && hasLabel("node-role.kubernetes.io/infra", "")(n)
	})

	// Pause holds: a paused pool's change is not applied.
	s2 := f.Spokes()[1]
	setPoolAnnotation(t, ctx, hub, s2, "infra", nmsync.AnnotationPaused, "true")
	waitFor(t, "paused pool shows Paused", 30*time.Second, func() bool {
		st, err := poolSync(ctx, hub, s2, "infra")
		return err == nil && st.Status.Phase == v1alpha1.PhasePaused
	})
	if _, err := s2.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/paused-change"] = "x" }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if nodesHold(ctx, s2, "infra", hasLabel("example.com/paused-change", "x")) {
		t.Error("a paused pool's change was applied")
	}
	setPoolAnnotation(t, ctx, hub, s2, "infra", nmsync.AnnotationPaused, "")
	waitFor(t, "unpaused pool converges", 30*time.Second, func() bool {
		return nodesHold(ctx, s2, "infra", hasLabel("example.com/paused-change", "x"))
	})

	// Events on the MachinePool tell people what was done.
	waitFor(t, "Applied Event on the MachinePool", 10*time.Second, func() bool {
		return hasEvent(ctx, hub, s1.Name, s1.Name+"-infra", fleet.EventApplied)
	})

	// Least authority: startFleet's cleanup checks the spokes' audit logs.
}

func TestControllerDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 2)
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/tier"] = "gold" }); err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.DryRun = true
	startController(t, ctx, controllerConfig(t, ctx, f), opts)
	waitFor(t, "dry run reports drift", time.Minute, func() bool {
		st, err := poolSync(ctx, f.Hub.Client, s, "infra")
		return err == nil && st.Status.Phase == v1alpha1.PhaseDrifted && st.Status.Reason == "DryRun" && st.Status.Drifted == 4
	})
	if nodesHold(ctx, s, "infra", hasLabel("example.com/tier", "gold")) {
		t.Error("dry run wrote to Nodes")
	}
	for _, e := range readAudit(t, s.AuditLogPath) {
		if e.Verb != "get" && e.Verb != "list" && e.Verb != "watch" {
			t.Errorf("dry run sent a %s to %s", e.Verb, e.RequestURI)
		}
	}
}

func setPoolAnnotation(t *testing.T, ctx context.Context, hub client.Client, s *localfleet.Spoke, pool, k, v string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mp := &hivev1.MachinePool{}
		if err := hub.Get(ctx, types.NamespacedName{Namespace: s.Name, Name: s.Name + "-" + pool}, mp); err != nil {
			return err
		}
		if mp.Annotations == nil {
			mp.Annotations = map[string]string{}
		}
		if v == "" {
			delete(mp.Annotations, k)
		} else {
			mp.Annotations[k] = v
		}
		return hub.Update(ctx, mp)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func hasEvent(ctx context.Context, hub client.Client, namespace, name, reason string) bool {
	list := &eventsv1.EventList{}
	if err := hub.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return false
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			return true
		}
	}
	return false
}

// allowedSpokeRequests are the only requests the hub may make to a spoke.
func allowedSpokeRequest(e auditEvent) bool {
	if e.ObjectRef.Resource == "" {
		path, _, _ := strings.Cut(e.RequestURI, "?")
		return e.Verb == "get" && path == "/version"
	}
	switch e.ObjectRef.Resource {
	case "machinesets":
		return e.ObjectRef.Namespace == "openshift-machine-api" && slices.Contains([]string{"get", "list", "watch"}, e.Verb)
	case "machines":
		return e.ObjectRef.Namespace == "openshift-machine-api" && slices.Contains([]string{"get", "list", "watch", "patch"}, e.Verb)
	case "nodes":
		return slices.Contains([]string{"get", "list", "watch", "patch"}, e.Verb)
	}
	return false
}

func assertAllowedAudit(t *testing.T, s *localfleet.Spoke) {
	t.Helper()
	entries := readAudit(t, s.AuditLogPath)
	seen := map[string]int{}
	for _, e := range entries {
		if e.User.Username != localfleet.CredentialUser {
			continue // a peer on the spoke, such as nodelink
		}
		if !allowedSpokeRequest(e) {
			t.Errorf("%s: the hub sent a request outside its allow-list: %s %s (%s)", s.Name, e.Verb, e.RequestURI, e.ObjectRef.Resource)
		}
		seen[e.Verb+" "+e.ObjectRef.Resource]++
	}
	if testing.Verbose() {
		t.Logf("%s: audit log: %v", s.Name, seen)
	}
}

// controllerConfig returns a hub config that acts as the controller's
// ServiceAccount under config/hub's RBAC (impersonated by the admin).
func controllerConfig(t *testing.T, ctx context.Context, f *localfleet.Fleet) *rest.Config {
	t.Helper()
	user, err := installHubRBAC(ctx, f)
	if err != nil {
		t.Fatalf("install config/hub RBAC: %v", err)
	}
	cfg := rest.CopyConfig(f.Hub.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	// The impersonated user must be able to do what the controller needs.
	c, err := client.New(cfg, client.Options{Scheme: fleet.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &hivev1.ClusterDeploymentList{}); err != nil {
		t.Fatalf("controller identity cannot list ClusterDeployments: %v", err)
	}
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = "default", "probe"
	if err := c.Create(ctx, cm); !apierrors.IsForbidden(err) {
		t.Fatalf("controller identity may create ConfigMaps (want Forbidden): %v", err)
	}
	return cfg
}

// addUnmanagedMachine adds a MachineSet like pool's but without Hive's
// hive.openshift.io/machine-pool label, with one Machine and its linked Node.
func addUnmanagedMachine(t *testing.T, ctx context.Context, s *localfleet.Spoke, pool string) (machine, node string) {
	t.Helper()
	cur, err := s.MachineSet(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	ms := cur.DeepCopy()
	ms.ObjectMeta = metav1.ObjectMeta{Namespace: cur.Namespace, Name: "user-" + cur.Name, Labels: map[string]string{}}
	for k, v := range cur.Labels {
		if k != nmsync.LabelMachinePool {
			ms.Labels[k] = v
		}
	}
	ms.Spec.Selector.MatchLabels[nmsync.LabelMachineSet] = ms.Name
	ms.Spec.Template.Labels[nmsync.LabelMachineSet] = ms.Name
	ms.Status = machinev1beta1.MachineSetStatus{}
	if err := s.Admin.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	m := localfleet.MachineFor(ms, ms.Name+"-0", "aws:///"+localfleet.Zone+"/i-user-0")
	if err := s.Admin.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	n := localfleet.NodeFor(m, "user-0.ec2.internal", localfleet.Zone, 0)
	if err := s.Admin.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	m.Status.NodeRef = &corev1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID}
	if err := s.Admin.Status().Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	return m.Name, n.Name
}

// ownedAnnotations returns this controller's bookkeeping annotations.
func ownedAnnotations(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		if strings.HasPrefix(k, "hub-node-metadata.openshift.io/") {
			out[k] = v
		}
	}
	return out
}

// A MachinePoolSync whose status was never written (its creator's first status
// write failed) gets a whole status, required counts included when they are 0
// (an empty pool): a merge patch would leave them out, and the hub's schema
// refuse it.
func TestNeverWrittenStatusIsWrittenWhole(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 0)
	hub := f.Hub.Client
	bare := &v1alpha1.MachinePoolSync{ObjectMeta: metav1.ObjectMeta{Namespace: s.Name, Name: s.Name + "-infra"}}
	if err := hub.Create(ctx, bare); err != nil {
		t.Fatal(err)
	}
	startController(t, ctx, controllerConfig(t, ctx, f), testOptions())
	waitFor(t, "the empty pool's status written", time.Minute, func() bool {
		st, err := poolSync(ctx, hub, s, "infra")
		return err == nil && st.Status.Phase == v1alpha1.PhaseInSync && st.Status.Total == 0
	})
}
