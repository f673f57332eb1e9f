package int_test

import (
	"context"
	"fmt"
	"slices"
	gosync "sync"
	"testing"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// syncPass runs one pass of the applier over every Machine of the pool, as
// the controller does, and returns all results.
func syncPass(t *testing.T, ctx context.Context, hub client.Client, spoke client.Client, s *localfleet.Spoke, pool string) []nmsync.Result {
	t.Helper()
	mp := &hivev1.MachinePool{}
	if err := hub.Get(ctx, types.NamespacedName{Namespace: s.Name, Name: s.Name + "-" + pool}, mp); err != nil {
		t.Fatal(err)
	}
	d, _, err := nmsync.DesiredFromPool(mp.Spec)
	if err != nil {
		t.Fatalf("pool refused: %v", err)
	}
	ms := &machinev1beta1.MachineSetList{}
	ml := &machinev1beta1.MachineList{}
	nl := &corev1.NodeList{}
	for _, l := range []client.ObjectList{ms, ml} {
		if err := spoke.List(ctx, l, client.InNamespace(nmsync.MachineAPINamespace)); err != nil {
			t.Fatal(err)
		}
	}
	if err := spoke.List(ctx, nl); err != nil {
		t.Fatal(err)
	}
	a := &nmsync.Applier{Client: spoke, Reader: spoke}
	var out []nmsync.Result
	for _, tg := range nmsync.Targets(mp.Spec.Name, ms.Items, ml.Items, nl.Items) {
		out = append(out, a.SyncTarget(ctx, d, tg)...)
	}
	return out
}

type tally struct{ objects, patched, inSync, requests, conflicts, failed int }

func count(rs []nmsync.Result) tally {
	var c tally
	for _, r := range rs {
		if r.Outcome == nmsync.OutcomeSkipped {
			continue
		}
		c.objects++
		c.requests += r.Requests
		c.conflicts += r.Conflicts
		switch r.Outcome {
		case nmsync.OutcomePatched:
			c.patched++
		case nmsync.OutcomeInSync:
			c.inSync++
		default:
			c.failed++
		}
	}
	return c
}

// snapshotForeign returns, per Node, the labels and taints the pool does not
// declare, for a before/after comparison.
func snapshotForeign(t *testing.T, ctx context.Context, s *localfleet.Spoke, pool string, poolKeys map[string]bool) map[string]string {
	t.Helper()
	nodes, err := s.Nodes(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range nodes {
		var labels []string
		for k, v := range n.Labels {
			if !poolKeys[k] {
				labels = append(labels, k+"="+v)
			}
		}
		slices.Sort(labels)
		var taints []string
		for _, tt := range n.Spec.Taints {
			if !poolKeys[tt.Key] {
				taints = append(taints, fmt.Sprintf("%s=%s:%s", tt.Key, tt.Value, tt.Effect))
			}
		}
		out[n.Name] = fmt.Sprint(labels, taints)
	}
	return out
}

// foreign is what a pool's Nodes hold of labels and taints the pool does
// not declare, noted before a change that must leave them alone.
type foreign struct {
	s        *localfleet.Spoke
	pool     string
	poolKeys map[string]bool
	before   map[string]string
}

func noteForeign(t *testing.T, ctx context.Context, s *localfleet.Spoke, pool string, poolKeys map[string]bool) foreign {
	t.Helper()
	return foreign{s: s, pool: pool, poolKeys: poolKeys, before: snapshotForeign(t, ctx, s, pool, poolKeys)}
}

// assertKept checks that the pool's Nodes hold the same foreign labels and
// taints as when they were noted.
func (f foreign) assertKept(t *testing.T, ctx context.Context) {
	t.Helper()
	if after := snapshotForeign(t, ctx, f.s, f.pool, f.poolKeys); fmt.Sprint(after) != fmt.Sprint(f.before) {
		t.Errorf("labels or taints of others changed:\nbefore %v\nafter  %v", f.before, after)
	}
}

func TestSyncAddChangeRemove(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "infra").
		WithReplicas(4).
		WithLabels(map[string]string{"node-role.kubernetes.io/infra": "", "example.com/tier": "gold"}).
		WithMachineLabels(map[string]string{"example.com/owner": "sre"}).
		WithTaints(localfleet.Taint("node-role.kubernetes.io/infra", "reserved", corev1.TaintEffectNoSchedule))); err != nil {
		t.Fatal(err)
	}
	spoke := spokeClientFromHub(t, ctx, f, s.Key())
	poolKeys := map[string]bool{"node-role.kubernetes.io/infra": true, "example.com/tier": true, "example.com/zone-pin": true, "example.com/dedicated": true}
	others := noteForeign(t, ctx, s, "infra", poolKeys)

	// Pass 1 adopts what machine-api copied from the template at creation:
	// one bookkeeping write per object, then nothing.
	adopt := count(syncPass(t, ctx, f.Hub.Client, spoke, s, "infra"))
	if adopt.objects != 8 || adopt.failed != 0 {
		t.Fatalf("adoption pass: %+v, want 8 objects and no failures", adopt)
	}
	if again := count(syncPass(t, ctx, f.Hub.Client, spoke, s, "infra")); again.requests != 0 {
		t.Fatalf("a pass over a fleet in sync sent %d requests", again.requests)
	}

	// The scripted change: add a label and a taint, change a taint's value
	// and a label's value, remove a label, change the machine labels.
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
		spec.Labels = map[string]string{"node-role.kubernetes.io/infra": "", "example.com/zone-pin": "a"}
		spec.MachineLabels = map[string]string{"example.com/owner": "platform"}
		spec.Taints = []corev1.Taint{
			localfleet.Taint("node-role.kubernetes.io/infra", "dedicated", corev1.TaintEffectNoSchedule),
			localfleet.Taint("example.com/dedicated", "true", corev1.TaintEffectNoExecute),
		}
	}); err != nil {
		t.Fatal(err)
	}
	change := count(syncPass(t, ctx, f.Hub.Client, spoke, s, "infra"))
	t.Logf("scripted change on one spoke: %d objects drifted, %d requests sent, %d conflicts met", change.patched, change.requests, change.conflicts)
	if change.patched != 8 || change.requests != 8 || change.conflicts != 0 || change.failed != 0 {
		t.Errorf("change pass: %+v, want 8 objects patched with exactly 8 requests", change)
	}
	if again := count(syncPass(t, ctx, f.Hub.Client, spoke, s, "infra")); again.requests != 0 {
		t.Errorf("second pass after the change sent %d requests, want 0", again.requests)
	}

	machines, err := s.Machines(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range machines {
		if m.Labels["example.com/owner"] != "platform" || m.Labels[nmsync.LabelMachineSet] == "" {
			t.Errorf("Machine %s labels %v", m.Name, m.Labels)
		}
		if _, ok := m.Spec.Labels["example.com/tier"]; ok {
			t.Errorf("Machine %s still has the removed node label: %v", m.Name, m.Spec.Labels)
		}
		if m.Spec.Labels["example.com/zone-pin"] != "a" {
			t.Errorf("Machine %s spec.metadata.labels %v", m.Name, m.Spec.Labels)
		}
		assertTaint(t, "Machine "+m.Name, m.Spec.Taints, "node-role.kubernetes.io/infra", "dedicated", corev1.TaintEffectNoSchedule)
		assertTaint(t, "Machine "+m.Name, m.Spec.Taints, "example.com/dedicated", "true", corev1.TaintEffectNoExecute)
	}
	nodes, err := s.Nodes(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if _, ok := n.Labels["example.com/tier"]; ok {
			t.Errorf("Node %s still has the removed label", n.Name)
		}
		if n.Labels["example.com/zone-pin"] != "a" {
			t.Errorf("Node %s labels %v", n.Name, n.Labels)
		}
		assertTaint(t, "Node "+n.Name, n.Spec.Taints, "node-role.kubernetes.io/infra", "dedicated", corev1.TaintEffectNoSchedule)
		assertTaint(t, "Node "+n.Name, n.Spec.Taints, "example.com/dedicated", "true", corev1.TaintEffectNoExecute)
	}
	others.assertKept(t, ctx)
}

func assertTaint(t *testing.T, what string, taints []corev1.Taint, key, value string, effect corev1.TaintEffect) {
	t.Helper()
	n := 0
	for _, tt := range taints {
		if tt.Key == key && tt.Effect == effect {
			n++
			if tt.Value != value {
				t.Errorf("%s: taint %s:%s has value %q, want %q", what, key, effect, tt.Value, value)
			}
		}
	}
	if n != 1 {
		t.Errorf("%s: taint %s:%s present %d times, want once: %v", what, key, effect, n, taints)
	}
}

func TestSyncWithConcurrentWriter(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "gpu").WithReplicas(6)); err != nil {
		t.Fatal(err)
	}
	spoke := spokeClientFromHub(t, ctx, f, s.Key())
	nodes, err := s.Nodes(ctx, "gpu")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdatePool(ctx, "gpu", func(spec *hivev1.MachinePoolSpec) {
		spec.Labels = map[string]string{"example.com/accelerator": "a100"}
		spec.Taints = []corev1.Taint{localfleet.Taint("example.com/gpu-only", "true", corev1.TaintEffectNoSchedule)}
	}); err != nil {
		t.Fatal(err)
	}

	// Another writer (an operator, a person with kubectl) labels and taints
	// the same Nodes, with updates that race ours, until told to stop.
	stop := make(chan struct{})
	var wg gosync.WaitGroup
	lastRound := map[string]int{}
	var mu gosync.Mutex
	for _, n := range nodes {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					cur := &corev1.Node{}
					if err := s.Admin.Get(ctx, types.NamespacedName{Name: n.Name}, cur); err != nil {
						return err
					}
					cur.Labels["example.com/writer-round"] = fmt.Sprint(i)
					cur.Spec.Taints = slices.DeleteFunc(cur.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == "example.com/flap" })
					if i%2 == 0 {
						cur.Spec.Taints = append(cur.Spec.Taints, corev1.Taint{Key: "example.com/flap", Value: fmt.Sprint(i), Effect: corev1.TaintEffectPreferNoSchedule})
					}
					return s.Admin.Update(ctx, cur)
				})
				if err != nil {
					t.Errorf("other writer: %v", err)
					return
				}
				mu.Lock()
				lastRound[n.Name] = i
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	var all []nmsync.Result
	for range 3 {
		all = append(all, syncPass(t, ctx, f.Hub.Client, spoke, s, "gpu")...)
	}
	close(stop)
	wg.Wait()
	c := count(all)
	t.Logf("with a concurrent writer: %d results, %d requests, %d conflicts met and retried, %d gave up", c.objects, c.requests, c.conflicts, c.failed)
	for _, r := range all {
		if r.Outcome == nmsync.OutcomeFailed {
			t.Errorf("%s %s failed under contention (only conflicts are expected): %v", r.Kind, r.Name, r.Err)
		}
	}
	// Once the other writer is done, one pass converges and the next is idle.
	if fc := count(syncPass(t, ctx, f.Hub.Client, spoke, s, "gpu")); fc.failed != 0 {
		t.Errorf("after the writer stopped, a pass still failed: %+v", fc)
	}
	if fc := count(syncPass(t, ctx, f.Hub.Client, spoke, s, "gpu")); fc.requests != 0 {
		t.Errorf("a pass over converged Nodes sent %d requests", fc.requests)
	}
	after, err := s.Nodes(ctx, "gpu")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range after {
		if n.Labels["example.com/accelerator"] != "a100" {
			t.Errorf("Node %s lacks the pool label", n.Name)
		}
		assertTaint(t, "Node "+n.Name, n.Spec.Taints, "example.com/gpu-only", "true", corev1.TaintEffectNoSchedule)
		round := lastRound[n.Name]
		if n.Labels["example.com/writer-round"] != fmt.Sprint(round) {
			t.Errorf("Node %s: the other writer's last label (round %d) was lost: %q", n.Name, round, n.Labels["example.com/writer-round"])
		}
		hasFlap := slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == "example.com/flap" })
		if hasFlap != (round%2 == 0) {
			t.Errorf("Node %s: the other writer's taint state was lost (round %d, flap present %v)", n.Name, round, hasFlap)
		}
		if !slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == corev1.TaintNodeNotReady }) {
			t.Errorf("Node %s lost the not-ready taint", n.Name)
		}
	}
}

func TestSyncCrashBetweenMachineAndNode(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "infra").
		WithReplicas(2).WithLabels(map[string]string{"example.com/old": "1"})); err != nil {
		t.Fatal(err)
	}
	spoke := spokeClientFromHub(t, ctx, f, s.Key())
	syncPass(t, ctx, f.Hub.Client, spoke, s, "infra") // adopt
	mp, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
		spec.Labels = map[string]string{"example.com/new": "2"}
		spec.Taints = []corev1.Taint{localfleet.Taint("example.com/new", "2", corev1.TaintEffectNoSchedule)}
	})
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := nmsync.DesiredFromPool(mp.Spec)
	if err != nil {
		t.Fatal(err)
	}
	// The process dies right after the Machine writes, before any Node write.
	machines, err := s.Machines(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for i := range machines {
		p := nmsync.PlanMachine(d, &machines[i])
		if p.InSync() {
			t.Fatal("Machine unexpectedly in sync")
		}
		if err := spoke.Patch(ctx, &machines[i], client.RawPatch(types.MergePatchType, p.Patch)); err != nil {
			t.Fatal(err)
		}
	}
	// The next run converges: Machines in sync, Nodes patched once each.
	c := count(syncPass(t, ctx, f.Hub.Client, spoke, s, "infra"))
	if c.patched != 2 || c.requests != 2 || c.failed != 0 {
		t.Errorf("recovery pass: %+v, want the 2 Nodes patched with 2 requests", c)
	}
	nodes, err := s.Nodes(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if _, ok := n.Labels["example.com/old"]; ok {
			t.Errorf("Node %s kept the removed label", n.Name)
		}
		if n.Labels["example.com/new"] != "2" {
			t.Errorf("Node %s lacks the new label", n.Name)
		}
		assertTaint(t, "Node "+n.Name, n.Spec.Taints, "example.com/new", "2", corev1.TaintEffectNoSchedule)
	}
}
