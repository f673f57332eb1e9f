package int_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// The core scenarios, on every spoke version, in one mixed fleet with one
// controller: /version and one patch per drifted object, a removal, a new Node, out-of-band drift
// repaired, a paced NoExecute rollout, credential rotation, and a dead spoke
// reported Unreachable without polling; the fleet's cleanup checks every
// spoke's audit log against the allow-list. A watch that expires is
// TestSpokeVersionsWatchExpiry.
func TestSpokeVersionsCoreScenarios(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 10*time.Minute)
	versions := spokeVersions(t)
	f := startVersionFleet(t, ctx, versions)
	for _, s := range f.Spokes() {
		if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "infra").
			WithReplicas(3).
			WithLabels(map[string]string{"node-role.kubernetes.io/infra": ""}).
			WithTaints(localfleet.Taint("node-role.kubernetes.io/infra", "reserved", corev1.TaintEffectNoSchedule)).
			WithAnnotation(nmsync.AnnotationNoExecuteBatch, "1").
			WithAnnotation(nmsync.AnnotationNoExecuteInterval, versionsPaceInterval.String())); err != nil {
			t.Fatal(err)
		}
	}
	startController(t, ctx, controllerConfig(t, ctx, f), testOptions())
	for i, s := range f.Spokes() {
		// One after the other: parallel subtests would wait for free slots
		// among the suite's parallel tests, and their timings with them.
		t.Run(versions[i], func(t *testing.T) { coreScenarios(t, ctx, f, s, versions[i]) })
	}
}

const versionsPaceInterval = 3 * time.Second

func coreScenarios(t *testing.T, ctx context.Context, f *localfleet.Fleet, s *localfleet.Spoke, minor string) {
	hub := f.Hub.Client
	waitInSync(t, ctx, f, s, 2*time.Minute)
	versionAndWriteCost(t, ctx, f, s, minor)

	// A removal: what the pool stops declaring leaves every Node.
	changeAndConverge(t, ctx, s, "example.com/remove-me", "1", 30*time.Second)
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { delete(spec.Labels, "example.com/remove-me") }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "removal reaches every Node", 30*time.Second, func() bool {
		return nodesHold(ctx, s, "infra", lacksLabel("example.com/remove-me"))
	})

	// A new Node: its MachineSet's template lacks the pool's new label (Hive
	// could not reach the spoke), so the controller must write it.
	if _, err := s.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/new"] = "1" }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the hub-only change reaches every Node", 30*time.Second, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel("example.com/new", "1"))
	})
	ms, err := s.ScaleUp(ctx, "infra", 1)
	if err != nil {
		t.Fatal(err)
	}
	node, err := s.LinkNode(ctx, ms[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new Node gets the pool's label", 30*time.Second, func() bool {
		nodes, _ := s.Nodes(ctx, "infra")
		return len(nodes) == 4 && nodesHold(ctx, s, "infra", hasLabel("example.com/new", "1"))
	})

	// Out-of-band drift is repaired.
	if err := s.RemoveNodeLabel(ctx, node.Name, "example.com/new"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "out-of-band removal repaired", 30*time.Second, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel("example.com/new", "1"))
	})

	// A paced NoExecute taint: one Node per interval.
	const drain = "example.com/drain"
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
		spec.Taints = append(spec.Taints, localfleet.Taint(drain, "true", corev1.TaintEffectNoExecute))
	}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	tainted := func() int {
		nodes, _ := s.Nodes(ctx, "infra")
		n := 0
		for _, node := range nodes {
			if hasTaint(drain, "true", corev1.TaintEffectNoExecute)(node) {
				n++
			}
		}
		return n
	}
	waitFor(t, "the first batch", 10*time.Second, func() bool { return tainted() >= 1 })
	if n := tainted(); n > 1 && time.Since(changed) < versionsPaceInterval-500*time.Millisecond {
		t.Errorf("%d Nodes tainted NoExecute %s after the change, want 1 per %s", n, time.Since(changed).Round(time.Millisecond), versionsPaceInterval)
	}
	took := waitFor(t, "the paced rollout reaches every Node", 4*versionsPaceInterval+20*time.Second, func() bool { return tainted() == 4 })
	if took < 3*versionsPaceInterval-time.Second {
		t.Errorf("4 Nodes tainted NoExecute in %s, want batches of 1 every %s", took.Round(time.Millisecond), versionsPaceInterval)
	}
	waitInSync(t, ctx, f, s, 30*time.Second)

	// Credential rotation: the Secret on the hub is rewritten, the old token revoked.
	if err := s.RotateCredential(ctx); err != nil {
		t.Fatal(err)
	}
	changeAndConverge(t, ctx, s, "example.com/rotated", "1", 60*time.Second)

	// A dead spoke is reported Unreachable, and a healthy one is not polled
	// meanwhile: no GET /version in a quiet window before the fault.
	quiet := auditLines(t, s)
	time.Sleep(5 * time.Second)
	for _, e := range readAudit(t, s.AuditLogPath)[quiet:] {
		if e.RequestURI == "/version" {
			t.Errorf("a healthy spoke was probed at rest: %s %s", e.Verb, e.RequestURI)
		}
	}
	if err := s.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a dead spoke reported Unreachable", 90*time.Second, func() bool {
		p, _ := poolReason(ctx, hub, s)
		return p == v1alpha1.PhaseUnreachable
	})
	if err := s.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	changeAndConverge(t, ctx, s, "example.com/healed", "1", 90*time.Second)
	waitInSync(t, ctx, f, s, time.Minute)

	// Nothing of others was lost on the way.
	nodes, err := s.Nodes(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		for _, k := range []string{"kubernetes.io/hostname", "node-role.kubernetes.io/worker", "topology.kubernetes.io/zone"} {
			if _, ok := n.Labels[k]; !ok {
				t.Errorf("Node %s lost %s", n.Name, k)
			}
		}
		if !slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == corev1.TaintNodeNotReady }) {
			t.Errorf("Node %s lost %s", n.Name, corev1.TaintNodeNotReady)
		}
		if strings.Contains(fmt.Sprint(n.Labels), "example.com/remove-me") {
			t.Errorf("Node %s kept a removed label", n.Name)
		}
	}
}

// A watch that expires, on every spoke version: the spokes serve watches
// from etcd (no watch cache) and compact it every second, the hub's
// connection to each goes through a proxy that drops it for a few seconds
// while the spoke's Nodes change, and the controller's watches, resumed from
// the resourceVersions they had, are answered 410 Gone (their revision was
// compacted); each kind is listed again, and the cluster carries on.
func TestSpokeVersionsWatchExpiry(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 6*time.Minute)
	versions := spokeVersions(t)
	f := startVersionFleetWith(t, ctx, versions, func(o *localfleet.Options) {
		o.SpokeArgs = map[string]string{"watch-cache": "false", "etcd-compaction-interval": "1s"}
	})
	for _, s := range f.Spokes() {
		addInfraPool(t, ctx, s, 3)
	}
	startController(t, ctx, controllerConfig(t, ctx, f), testOptions())
	for i, s := range f.Spokes() {
		t.Run(versions[i], func(t *testing.T) { watchExpires(t, ctx, f, s) })
	}
}

func watchExpires(t *testing.T, ctx context.Context, f *localfleet.Fleet, s *localfleet.Spoke) {
	waitInSync(t, ctx, f, s, 2*time.Minute)
	proxy, err := s.UseProxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The rewritten Secret reconnects the controller through the proxy.
	changeAndConverge(t, ctx, s, "example.com/via-proxy", "1", time.Minute)
	skip := auditLines(t, s)
	proxy.BlackHole(true)
	nodes, err := s.Nodes(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		for _, n := range nodes {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/tick":"%d"}}}`, i)
			if err := s.Admin.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(4 * time.Second) // at least two compactions past the watches' revisions
	proxy.BlackHole(false)
	changeAndConverge(t, ctx, s, "example.com/after-expiry", "1", time.Minute)
	time.Sleep(5 * time.Second) // a failed watch is tried again after its loop's backoff (0.8 to 1.6 s)

	// Each kind's watch was opened again (from its old resourceVersion,
	// answered 410 in the stream), then the kind was listed again; a
	// reconnect would list first.
	resumed, relisted := map[string]bool{}, map[string]bool{}
	for _, e := range readAudit(t, s.AuditLogPath)[skip:] {
		if e.User.Username != localfleet.CredentialUser {
			continue
		}
		kind := e.ObjectRef.Resource
		switch {
		case e.Verb == "watch" && e.Stage == "ResponseStarted" && !relisted[kind]:
			resumed[kind] = true
		case e.Verb == "list" && resumed[kind]:
			relisted[kind] = true
		}
	}
	t.Logf("%s (%s): watches resumed %v, kinds listed again after them %v", s.Name, s.Version, resumed, relisted)
	if !relisted["nodes"] {
		t.Errorf("the Node watch was not resumed and then listed again after its revision was compacted")
	}
}
