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
	"k8s.io/apimachinery/pkg/types"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// slowOptions write one object at a time at 5 requests/s per spoke, so
// that a fault can land in the middle of a rollout.
func slowOptions() fleet.Options {
	o := testOptions()
	o.WritesPerCluster = 1
	o.Remote.QPS = 5
	o.Remote.Burst = 1
	return o
}

// rolloutKeys are the keys the rollout tests' pool declares.
var rolloutKeys = map[string]bool{"node-role.kubernetes.io/infra": true, "example.com/rollout": true}

func rolledOut(n corev1.Node) bool {
	return hasLabel("example.com/rollout", "v2")(n) && hasTaint("node-role.kubernetes.io/infra", "v2", corev1.TaintEffectNoSchedule)(n)
}

// rollout is a change of the infra pool of a spoke (a new label, and its
// taint's new value) that reaches each of its Nodes and their Machines: two
// drifted objects a Node.
type rollout struct {
	s      *localfleet.Spoke
	nodes  int
	others foreign // the Nodes' foreign labels and taints before it
	skip   int     // the spoke's audit entries before it
}

// beforeRollout waits until the infra pool of s (nodes Nodes) is InSync and
// notes what the rollout must leave alone.
func beforeRollout(t *testing.T, ctx context.Context, f *localfleet.Fleet, s *localfleet.Spoke, nodes int) *rollout {
	t.Helper()
	waitInSync(t, ctx, f, s, 2*time.Minute)
	return &rollout{s: s, nodes: nodes, others: noteForeign(t, ctx, s, "infra", rolloutKeys), skip: auditLines(t, s)}
}

// start makes the pool change.
func (r *rollout) start(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := r.s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
		spec.Labels["example.com/rollout"] = "v2"
		spec.Taints[0].Value = "v2"
	}); err != nil {
		t.Fatal(err)
	}
}

// interrupt starts the rollout and calls fault (what it does, for the log)
// once two Nodes have it: with the controller writing one object at a time
// at 5 requests/s (slowOptions, slowFlags), in its middle.
func (r *rollout) interrupt(t *testing.T, ctx context.Context, what string, fault func()) {
	t.Helper()
	r.start(t, ctx)
	var n int
	waitFor(t, "rollout under way", time.Minute, func() bool { n = r.rolledOut(ctx); return n >= 2 })
	if n >= r.nodes {
		t.Fatalf("the rollout was done (%d of %d Nodes) before the fault (%s) could interrupt it", n, r.nodes, what)
	}
	fault()
	t.Logf("%s with %d of %d Nodes rolled out", what, n, r.nodes)
}

// rolledOut counts the Nodes that have the rollout.
func (r *rollout) rolledOut(ctx context.Context) int {
	nodes, _ := r.s.Nodes(ctx, "infra")
	n := 0
	for _, node := range nodes {
		if rolledOut(node) {
			n++
		}
	}
	return n
}

// completes waits up to 2 minutes for every Node to have the rollout, and
// checks that the labels and taints of others are as they were and that no
// pool taint is duplicated.
func (r *rollout) completes(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	waitFor(t, what, 2*time.Minute, func() bool { return r.rolledOut(ctx) == r.nodes })
	r.others.assertKept(t, ctx)
	nodes, err := r.s.Nodes(ctx, "infra")
	if err != nil || len(nodes) != r.nodes {
		t.Fatalf("%s: %d of %d Nodes read: %v", what, len(nodes), r.nodes, err)
	}
	for _, n := range nodes {
		assertTaint(t, "Node "+n.Name, n.Spec.Taints, "node-role.kubernetes.io/infra", "v2", corev1.TaintEffectNoSchedule)
	}
}

// checkPatches checks that the spoke got at most 1.1 patches a drifted
// object since the rollout began, whatever came in its middle.
func (r *rollout) checkPatches(t *testing.T) {
	t.Helper()
	drifted := 2 * r.nodes
	if n, _, _ := hubPatches(t, r.s, r.skip); n > drifted*11/10 {
		t.Errorf("%d patches for %d drifted objects, want <= 1.1x", n, drifted)
	} else {
		t.Logf("%d patches for %d drifted objects", n, drifted)
	}
}

func TestFaultSpokeKilledMidRollout(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 2)
	s, other := f.Spokes()[0], f.Spokes()[1]
	addInfraPool(t, ctx, s, 20)
	addInfraPool(t, ctx, other, 2)
	startController(t, ctx, controllerConfig(t, ctx, f), slowOptions())
	r := beforeRollout(t, ctx, f, s, 20)
	r.interrupt(t, ctx, "spoke killed", func() {
		if err := s.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
	})
	changeAndConverge(t, ctx, other, "example.com/meanwhile", "1", 15*time.Second)
	time.Sleep(2 * time.Second)
	if err := s.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	r.completes(t, ctx, "rollout completes after the restart")
	r.checkPatches(t)
}

func TestFaultSlowSpoke(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 2)
	s, other := f.Spokes()[0], f.Spokes()[1]
	addInfraPool(t, ctx, s, 6)
	addInfraPool(t, ctx, other, 2)
	proxy, err := s.UseProxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	startController(t, ctx, controllerConfig(t, ctx, f), testOptions())
	r := beforeRollout(t, ctx, f, s, 6)
	proxy.SetDelay(500 * time.Millisecond)
	r.start(t, ctx)
	changeAndConverge(t, ctx, other, "example.com/meanwhile", "1", 10*time.Second)
	r.completes(t, ctx, "slow spoke converges")
	r.checkPatches(t)
}

func TestFaultHubRestart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startOwnFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 3)
	startInSync(t, ctx, f, testOptions(), s)
	if err := f.RestartHub(); err != nil {
		t.Fatal(err)
	}
	changeAndConverge(t, ctx, s, "example.com/after-hub-restart", "1", time.Minute)
	waitFor(t, "status written after the hub restart", 30*time.Second, func() bool {
		st, err := poolSync(ctx, f.Hub.Client, s, "infra")
		return err == nil && st.Status.Phase == v1alpha1.PhaseInSync && st.Status.ObservedGeneration == generation(ctx, t, f, s)
	})
}

func generation(ctx context.Context, t *testing.T, f *localfleet.Fleet, s *localfleet.Spoke) int64 {
	mp := &hivev1.MachinePool{}
	if err := f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: s.Name, Name: s.Name + "-infra"}, mp); err != nil {
		return -1
	}
	return mp.Generation
}

func TestFaultWriterKeepsRemovingPoolLabel(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 3)
	opts := testOptions()
	opts.ContestedThreshold = 3
	opts.ContestedWindow = time.Minute
	startInSync(t, ctx, f, opts, s)
	nodes, _ := s.Nodes(ctx, "infra")
	victim := nodes[0].Name
	skip := auditLines(t, s)

	// Another writer removes the pool's role label from one Node again and
	// again, for 8 seconds.
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		_ = s.RemoveNodeLabel(ctx, victim, "node-role.kubernetes.io/infra")
		time.Sleep(200 * time.Millisecond)
	}
	writes := 0
	for _, e := range readAudit(t, s.AuditLogPath)[skip:] {
		if e.Verb == "patch" && strings.Contains(e.RequestURI, victim) {
			writes++
		}
	}
	t.Logf("%d patches to the contested Node in 8s", writes)
	if writes > opts.ContestedThreshold+1 {
		t.Errorf("the controller fought on: %d patches, threshold %d", writes, opts.ContestedThreshold)
	}
	waitFor(t, "Contested Event on the MachinePool", 10*time.Second, func() bool {
		return hasEvent(ctx, f.Hub.Client, s.Name, s.Name+"-infra", fleet.EventContested)
	})
	// While held, the pool says Contested and counts the held objects as
	// not delivered, never InSync.
	var held *v1alpha1.MachinePoolSync
	waitFor(t, "status Contested naming the Node", 10*time.Second, func() bool {
		var err error
		held, err = poolSync(ctx, f.Hub.Client, s, "infra")
		return err == nil && held.Status.Phase == v1alpha1.PhaseContested && held.Status.Drifted >= 1 && strings.Contains(held.Status.Message, victim)
	})
	// The drift report, read live, counts the same objects as not delivered.
	rows := driftRows(t, ctx, f)
	if len(rows) != 1 {
		t.Fatalf("drift -o json: want 1 row, got %+v", rows)
	}
	if r := rows[0]; r.DriftedMachines+r.DriftedNodes != held.Status.Drifted || r.Machines+r.Nodes != held.Status.Total {
		t.Errorf("status says %d of %d objects drifted (%s), the drift report %d+%d of %d+%d", held.Status.Drifted, held.Status.Total,
			held.Status.Message, r.DriftedMachines, r.DriftedNodes, r.Machines, r.Nodes)
	}
	// A pool change is written everywhere, the held Node too: the hold was
	// about the pool as it was.
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/still"] = "works" }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every Node converges", 30*time.Second, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel("example.com/still", "works"))
	})
	waitInSync(t, ctx, f, s, 10*time.Second)
}

func TestBadPoolsAreRefusedAndOthersCarryOn(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 6*time.Minute)
	f := startFleet(t, ctx, 2)
	s, other := f.Spokes()[0], f.Spokes()[1]
	addInfraPool(t, ctx, s, 2)
	addInfraPool(t, ctx, other, 2)
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "bad").WithReplicas(2).
		WithLabels(map[string]string{"example.com/bad": "v1"})); err != nil {
		t.Fatal(err)
	}
	startController(t, ctx, controllerConfig(t, ctx, f), testOptions())
	badStatus := func() (*v1alpha1.MachinePoolSync, error) { return poolSync(ctx, f.Hub.Client, s, "bad") }
	waitFor(t, "bad pool adopted", time.Minute, func() bool { st, err := badStatus(); return err == nil && st.Status.Phase == v1alpha1.PhaseInSync })
	badNodes := func() string { n, _ := s.Nodes(ctx, "bad"); return fmt.Sprint(n) }
	snapshot := snapshotForeign(t, ctx, s, "bad", map[string]bool{})

	many := map[string]string{}
	for i := range 150 {
		many[fmt.Sprintf("example.com/l%03d", i)] = "x"
	}
	cases := []struct {
		name   string
		mutate func(*hivev1.MachinePoolSpec)
		code   string
		names  string // the message must name this
	}{
		{"invalid label key", func(p *hivev1.MachinePoolSpec) { p.Labels = map[string]string{"bad key!": "v"} }, "InvalidKey", "bad key!"},
		{"invalid label value", func(p *hivev1.MachinePoolSpec) { p.Labels = map[string]string{"example.com/v": "a b"} }, "InvalidValue", "example.com/v"},
		{"huge label value", func(p *hivev1.MachinePoolSpec) {
			p.Labels = map[string]string{"example.com/v": strings.Repeat("x", 300)}
		}, "InvalidValue", "example.com/v"},
		{"empty taint effect", func(p *hivev1.MachinePoolSpec) { p.Taints = []corev1.Taint{{Key: "example.com/t", Value: "v"}} }, "InvalidEffect", "spec.taints[0].effect"},
		{"unknown taint effect", func(p *hivev1.MachinePoolSpec) {
			p.Taints = []corev1.Taint{{Key: "example.com/t", Value: "v", Effect: "Sometimes"}}
		}, "InvalidEffect", "Sometimes"},
		{"invalid taint key", func(p *hivev1.MachinePoolSpec) {
			p.Taints = []corev1.Taint{{Key: "-bad-", Effect: corev1.TaintEffectNoSchedule}}
		}, "InvalidKey", "-bad-"},
		{"reserved label", func(p *hivev1.MachinePoolSpec) { p.Labels = map[string]string{"kubernetes.io/hostname": "x"} }, "ReservedKey", "kubernetes.io/hostname"},
		{"reserved machine label", func(p *hivev1.MachinePoolSpec) {
			p.MachineLabels = map[string]string{"machine.openshift.io/instance-type": "x"}
		}, "ReservedKey", "machine.openshift.io/instance-type"},
		{"reserved taint", func(p *hivev1.MachinePoolSpec) {
			p.Taints = []corev1.Taint{{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}}
		}, "ReservedKey", "node.kubernetes.io/unschedulable"},
		{"hundreds of labels", func(p *hivev1.MachinePoolSpec) { p.Labels = many }, "TooMany", "spec.labels"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.UpdatePoolOnHub(ctx, "bad", func(p *hivev1.MachinePoolSpec) {
				p.Labels, p.MachineLabels, p.Taints = map[string]string{"example.com/bad": "v1"}, nil, nil
				tc.mutate(p)
			}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "refused with "+tc.code, 30*time.Second, func() bool {
				st, err := badStatus()
				return err == nil && st.Status.Phase == v1alpha1.PhaseRefused && st.Status.ObservedGeneration == poolGeneration(ctx, f, s, "bad")
			})
			st, _ := badStatus()
			if !strings.Contains(st.Status.Message, tc.names) || !strings.Contains(st.Status.Message+st.Status.Reason, tc.code) && st.Status.Reason != tc.code {
				t.Errorf("refusal does not name %q with code %s: %s / %s", tc.names, tc.code, st.Status.Reason, st.Status.Message)
			}
			if !hasEvent(ctx, f.Hub.Client, s.Name, s.Name+"-bad", fleet.EventRefused) {
				t.Error("no Refused Event on the MachinePool")
			}
			// Nothing changed on the bad pool's Nodes; the other pool and cluster carry on.
			if got := snapshotForeign(t, ctx, s, "bad", map[string]bool{}); fmt.Sprint(got) != fmt.Sprint(snapshot) {
				t.Errorf("a refused pool changed its Nodes: %s", badNodes())
			}
			changeAndConverge(t, ctx, s, "example.com/same-cluster", fmt.Sprint(i), 15*time.Second)
			changeAndConverge(t, ctx, other, "example.com/other-cluster", fmt.Sprint(i), 15*time.Second)
		})
	}

	t.Run("duplicate taints collapse, first value wins", func(t *testing.T) {
		if _, err := s.UpdatePoolOnHub(ctx, "bad", func(p *hivev1.MachinePoolSpec) {
			p.Labels, p.MachineLabels = map[string]string{"example.com/bad": "v1"}, nil
			p.Taints = []corev1.Taint{
				{Key: "example.com/dup", Value: "first", Effect: corev1.TaintEffectNoSchedule},
				{Key: "example.com/dup", Value: "second", Effect: corev1.TaintEffectNoSchedule},
			}
		}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "duplicate taints applied once", 30*time.Second, func() bool {
			return nodesHold(ctx, s, "bad", func(n corev1.Node) bool {
				c := 0
				for _, tt := range n.Spec.Taints {
					if tt.Key == "example.com/dup" {
						c++
						if tt.Value != "first" {
							return false
						}
					}
				}
				return c == 1
			})
		})
	})

	// Hive ignores machine labels that clash with machine-api's generated
	// ones and delivers the rest; so do we, and say so.
	t.Run("machine labels Hive ignores are ignored, the rest synced", func(t *testing.T) {
		if _, err := s.UpdatePoolOnHub(ctx, "bad", func(p *hivev1.MachinePoolSpec) {
			p.Labels, p.Taints = map[string]string{"example.com/bad": "v1", "example.com/with-ignored": "yes"}, nil
			p.MachineLabels = map[string]string{"machine.openshift.io/cluster-api-machineset": "stolen", "example.com/cost": "low"}
		}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the rest of the pool synced", 30*time.Second, func() bool {
			ms, err := s.Machines(ctx, "bad")
			if err != nil || len(ms) == 0 {
				return false
			}
			for _, m := range ms {
				if m.Labels["example.com/cost"] != "low" || m.Labels["machine.openshift.io/cluster-api-machineset"] == "stolen" {
					return false
				}
			}
			return nodesHold(ctx, s, "bad", hasLabel("example.com/with-ignored", "yes"))
		})
		// The status is written after the patches the wait above sees: wait for the one of
		// this generation.
		var st *v1alpha1.MachinePoolSync
		var err error
		var gen int64
		if _, ok := poll(ctx, pollInterval, 10*time.Second, func() bool {
			st, err = badStatus()
			gen = poolGeneration(ctx, f, s, "bad")
			return err == nil && st.Status.ObservedGeneration == gen && st.Status.Phase == v1alpha1.PhaseInSync && strings.Contains(st.Status.Message, "machine.openshift.io/cluster-api-machineset")
		}); !ok {
			t.Fatalf("status of generation %d does not name the ignored key: %v %+v", gen, err, st)
		}
		if !hasEvent(ctx, f.Hub.Client, s.Name, s.Name+"-bad", fleet.EventPoolWarning) {
			t.Errorf("no %s Event on the MachinePool", fleet.EventPoolWarning)
		}
		if _, err := s.UpdatePoolOnHub(ctx, "bad", func(p *hivev1.MachinePoolSpec) {
			p.MachineLabels = nil
			delete(p.Labels, "example.com/with-ignored")
		}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Machine without a nodeRef, nodeRef to a missing Node, Node of another Machine", func(t *testing.T) {
		linked, _ := s.Nodes(ctx, "bad")
		added, err := s.ScaleUp(ctx, "bad", 3)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetNodeRef(ctx, added[1].Name, "ghost-node"); err != nil {
			t.Fatal(err)
		}
		infraNodes, _ := s.Nodes(ctx, "infra")
		stolen := infraNodes[0].Name
		if err := s.SetNodeRef(ctx, added[2].Name, stolen); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UpdatePoolOnHub(ctx, "bad", func(p *hivev1.MachinePoolSpec) { p.Labels["example.com/bad"] = "v2" }); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "linked Nodes converge, three skipped", 30*time.Second, func() bool {
			st, err := badStatus()
			if err != nil || st.Status.Phase != v1alpha1.PhaseInSync || st.Status.Skipped != 3 {
				return false
			}
			for _, ln := range linked {
				n := corev1.Node{}
				if s.Admin.Get(ctx, types.NamespacedName{Name: ln.Name}, &n) != nil || !hasLabel("example.com/bad", "v2")(n) {
					return false
				}
			}
			return true
		})
		n := &corev1.Node{}
		if err := s.Admin.Get(ctx, types.NamespacedName{Name: stolen}, n); err != nil {
			t.Fatal(err)
		}
		if _, ok := n.Labels["example.com/bad"]; ok {
			t.Errorf("the bad pool wrote to a Node of another Machine: %v", n.Labels)
		}
		ghost := &corev1.Node{}
		if err := s.Admin.Get(ctx, types.NamespacedName{Name: "ghost-node"}, ghost); err == nil {
			t.Error("a Node was created for a dangling nodeRef")
		}
	})

	t.Run("ClusterDeployment without clusterMetadata", func(t *testing.T) {
		name := nameInShard(t, s.Name, "not-installed")
		cd := localfleet.NewClusterDeployment(s.Name, name).WithoutClusterMetadata().Build()
		if err := f.Hub.Client.Create(ctx, cd); err != nil {
			t.Fatal(err)
		}
		mp := localfleet.NewMachinePool(s.Name, name, "workers").WithLabels(map[string]string{"example.com/x": "1"}).Build()
		if err := f.Hub.Client.Create(ctx, mp); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "NotInstalled/NoClusterMetadata reported", 30*time.Second, func() bool {
			st := &v1alpha1.MachinePoolSync{}
			err := f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: s.Name, Name: mp.Name}, st)
			return err == nil && st.Status.Phase == v1alpha1.PhaseUnreachable && slices.Contains([]string{"NotInstalled", "NoClusterMetadata"}, st.Status.Reason)
		})
	})

	t.Run("MachinePool naming a missing ClusterDeployment", func(t *testing.T) {
		mp := localfleet.NewMachinePool(s.Name, nameInShard(t, s.Name, "ghost"), "workers").WithLabels(map[string]string{"example.com/x": "1"}).Build()
		if err := f.Hub.Client.Create(ctx, mp); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "ClusterDeploymentMissing reported", 30*time.Second, func() bool {
			st := &v1alpha1.MachinePoolSync{}
			err := f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: s.Name, Name: mp.Name}, st)
			return err == nil && st.Status.Reason == fleet.EventClusterMissing
		})
		changeAndConverge(t, ctx, other, "example.com/still-fine", "yes", 15*time.Second)
	})
}

func poolGeneration(ctx context.Context, f *localfleet.Fleet, s *localfleet.Spoke, pool string) int64 {
	mp := &hivev1.MachinePool{}
	if err := f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: s.Name, Name: s.Name + "-" + pool}, mp); err != nil {
		return -1
	}
	return mp.Generation
}
