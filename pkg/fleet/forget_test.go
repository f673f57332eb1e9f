package fleet

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	hivev1 "github.com/openshift/hive/apis/hive/v1"

	"github.com/openshift/hub-node-metadata/pkg/remote"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// notMemory are the Reconciler's fields that keep nothing per cluster, and
// why. Every other field must be registered in init's memories.
var notMemory = map[string]string{
	"Hub":      "the hub's client",
	"Live":     "the hub's uncached reader",
	"Recorder": "the Event recorder",
	"Opts":     "the options",
	"Spokes":   "forgotten through its own Forget (remote.Manager drops the connection)",
	"memories": "the registry itself",
}

// memoryCase fills one memory of the reconciler for a cluster, and says
// whether it keeps anything of the cluster or its pools.
type memoryCase struct {
	fill  func(r *Reconciler, c types.NamespacedName)
	holds func(r *Reconciler, c types.NamespacedName) bool
}

// memoryCases has a case per registered memory, by field name.
func memoryCases(reg *prometheus.Registry) map[string]memoryCase {
	pool := func(c types.NamespacedName) string { return c.Namespace + "/pool" }
	return map[string]memoryCase{
		"Metrics": {
			fill: func(r *Reconciler, c types.NamespacedName) {
				ck := c.String()
				r.Metrics.SetState(ck, StateDrifting)
				r.Metrics.LastSync.WithLabelValues(ck).Set(1)
				r.Metrics.Drifted.WithLabelValues(ck, "pool", nmsync.ResultKindNode).Set(1)
				r.Metrics.PoolRefused.WithLabelValues(ck, "pool", nmsync.CodeInvalidKey).Set(1)
				r.Metrics.Contested.WithLabelValues(ck, "pool").Set(1)
				r.Metrics.Denied.WithLabelValues(ck, "pool").Set(1)
				r.Metrics.NoExecutePending.WithLabelValues(ck, "pool", pendingPaced).Set(1)
			},
			holds: func(r *Reconciler, c types.NamespacedName) bool {
				return r.Metrics.State(c.String()) != "" || hasSeries(reg, "cluster", c.String())
			},
		},
		"contested": {
			fill: func(r *Reconciler, c types.NamespacedName) {
				r.contested.record(c.String(), "pool", "fp", nmsync.Result{Kind: nmsync.ResultKindMachine, Name: "m",
					Outcome: nmsync.OutcomePatched, Changes: []nmsync.Change{{Op: nmsync.OpAdd}}})
			},
			holds: func(r *Reconciler, c types.NamespacedName) bool { _, ok := r.contested.records[c.String()]; return ok },
		},
		"denials": {
			fill: func(r *Reconciler, c types.NamespacedName) {
				r.denials.record(c.String(), "pool", "fp", nmsync.Result{Kind: nmsync.ResultKindMachine, Name: "m",
					Outcome: nmsync.OutcomeFailed, Reason: nmsync.ReasonDenied, Requests: 1})
			},
			holds: func(r *Reconciler, c types.NamespacedName) bool { _, ok := r.denials.records[c.String()]; return ok },
		},
		"pacer": {
			fill:  func(r *Reconciler, c types.NamespacedName) { r.pacer.state(c.String(), "pool", "taints") },
			holds: func(r *Reconciler, c types.NamespacedName) bool { _, ok := r.pacer.clusters[c.String()]; return ok },
		},
		"nodes": {
			fill: func(r *Reconciler, c types.NamespacedName) {
				r.nodes.record(c.String(), nmsync.Result{Kind: nmsync.ResultKindNode, Name: "n", Outcome: nmsync.OutcomePatched,
					Changes: []nmsync.Change{{Kind: nmsync.KindNodeLabel, Op: nmsync.OpRemove, Key: "k", From: "v"}}})
			},
			holds: func(r *Reconciler, c types.NamespacedName) bool { _, ok := r.nodes.clusters[c.String()]; return ok },
		},
		"outages": {
			fill: func(r *Reconciler, c types.NamespacedName) {
				r.outages.record(c.String(), writeRound{Transient: 1, Cause: "down"})
				r.Metrics.WriteOutages.Inc() // as note does when an outage begins
			},
			holds: func(r *Reconciler, c types.NamespacedName) bool { _, ok := r.outages.wait(c.String()); return ok },
		},
		"propagation": {
			fill:  func(r *Reconciler, c types.NamespacedName) { r.propagation.seen(pool(c), 2, time.Unix(1000, 0)) },
			holds: func(r *Reconciler, c types.NamespacedName) bool { return r.propagation.timing(pool(c), 2) },
		},
		"statusRetry": {
			fill:  func(r *Reconciler, c types.NamespacedName) { r.statusRetry.When(c.String()) },
			holds: func(r *Reconciler, c types.NamespacedName) bool { return r.statusRetry.NumRequeues(c.String()) > 0 },
		},
		"lastPools": {
			fill: func(r *Reconciler, c types.NamespacedName) {
				r.lastPools.swap(c.String(), map[string]bool{"pool": true})
			},
			holds: func(r *Reconciler, c types.NamespacedName) bool { _, ok := r.lastPools.get(c.String()); return ok },
		},
		"lastConn": {
			fill:  func(r *Reconciler, c types.NamespacedName) { r.lastConn.swap(c.String(), remote.ReasonConnected) },
			holds: func(r *Reconciler, c types.NamespacedName) bool { _, ok := r.lastConn.get(c.String()); return ok },
		},
		"unsaid": {
			fill:  func(r *Reconciler, c types.NamespacedName) { r.unsaid.set(pool(c), unsaidChange{patched: 1}) },
			holds: func(r *Reconciler, c types.NamespacedName) bool { _, ok := r.unsaid.get(pool(c)); return ok },
		},
		"judged": {
			fill: func(r *Reconciler, c types.NamespacedName) {
				r.judged.set(c.String(), map[types.UID]string{"uid": "1/1"})
			},
			holds: func(r *Reconciler, c types.NamespacedName) bool { _, ok := r.judged.get(c.String()); return ok },
		},
		"written": {
			fill: func(r *Reconciler, c types.NamespacedName) {
				r.written.set(pool(c), writtenStatus{resourceVersion: "1"})
			},
			holds: func(r *Reconciler, c types.NamespacedName) bool { _, ok := r.written.get(pool(c)); return ok },
		},
	}
}

// hasSeries reports whether any series gathered from reg has label=value.
func hasSeries(reg *prometheus.Registry, label, value string) bool {
	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return true
				}
			}
		}
	}
	return false
}

// Forgetting a cluster empties every memory the reconciler keeps of it and
// its pools, and keeps another cluster's. The memories are the Reconciler's
// fields, found by reflection: a field that is neither registered in init
// nor listed in notMemory fails the test, and so does a registered one this
// test cannot fill, so a new memory cannot be left out of forget.
func TestForgetEmptiesEveryMemory(t *testing.T) {
	reg := prometheus.NewRegistry()
	spokes := newFakeSpokes()
	r := &Reconciler{Spokes: spokes, Metrics: NewMetrics(reg), Opts: Options{}.WithDefaults()}
	r.init()

	registered := map[uintptr]bool{}
	for _, m := range r.memories {
		registered[reflect.ValueOf(m).Pointer()] = true
	}
	var names []string
	v := reflect.ValueOf(r).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if _, ok := notMemory[name]; ok {
			continue
		}
		if f := v.Field(i); f.Kind() != reflect.Pointer || !registered[f.Pointer()] {
			t.Errorf("Reconciler.%s is not registered in init's memories: forget would leave it", name)
			continue
		}
		names = append(names, name)
	}
	if len(names) != len(r.memories) {
		t.Errorf("%d memories registered, %d fields hold them: a memory registered twice, or one that is no field", len(r.memories), len(names))
	}

	cases := memoryCases(reg)
	forgotten := types.NamespacedName{Namespace: "ns-a", Name: "a"}
	kept := types.NamespacedName{Namespace: "ns-b", Name: "b"}
	want, filled := map[string][2]bool{}, map[string][2]bool{}
	for _, name := range names {
		tc, ok := cases[name]
		if !ok {
			t.Errorf("Reconciler.%s: no memoryCase to fill and check it; add one", name)
			continue
		}
		tc.fill(r, forgotten)
		tc.fill(r, kept)
		filled[name] = [2]bool{tc.holds(r, forgotten), tc.holds(r, kept)}
		want[name] = [2]bool{true, true}
	}
	if diff := cmp.Diff(want, filled); diff != "" {
		t.Fatalf("filled memories (forgotten, kept), -want +got:\n%s", diff)
	}

	r.forget(forgotten)
	got := map[string][2]bool{}
	for _, name := range names {
		got[name] = [2]bool{cases[name].holds(r, forgotten), cases[name].holds(r, kept)}
		want[name] = [2]bool{false, true}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("memories after forgetting %s (forgotten, kept), -want +got:\n%s", forgotten, diff)
	}
	if diff := cmp.Diff([]types.NamespacedName{forgotten}, spokes.forgotten); diff != "" {
		t.Errorf("spokes forgotten, -want +got:\n%s", diff)
	}
	if n := testutil.ToFloat64(r.Metrics.WriteOutages); n != 1 {
		t.Errorf("clusters_in_write_outage = %v after forgetting one of two clusters in an outage, want 1", n)
	}
	for name := range cases {
		if !registered[v.FieldByName(name).Pointer()] {
			t.Errorf("memoryCase %s names no registered memory", name)
		}
	}
}

// A pool the last sync saw and this one does not (deleted) is forgotten
// with its cluster's other pools kept: what was written and left unsaid in
// its status goes too.
func TestGonePoolIsForgotten(t *testing.T) {
	r := &Reconciler{Spokes: newFakeSpokes(), Metrics: NewMetrics(prometheus.NewRegistry()), Opts: Options{}.WithDefaults()}
	r.init()
	cd := &hivev1.ClusterDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	for _, p := range []string{"gone", "kept"} {
		r.written.set("ns/"+p, writtenStatus{resourceVersion: "1"})
		r.unsaid.set("ns/"+p, unsaidChange{patched: 1})
	}
	r.forgetGonePools(cd, map[string]bool{"gone": true, "kept": true})
	r.forgetGonePools(cd, map[string]bool{"kept": true})
	for _, m := range []interface{ has(string) bool }{hasKey[writtenStatus]{r.written}, hasKey[unsaidChange]{r.unsaid}} {
		if m.has("ns/gone") || !m.has("ns/kept") {
			t.Errorf("%T after the pool went: gone %v, kept %v; want only kept", m, m.has("ns/gone"), m.has("ns/kept"))
		}
	}
}

type hasKey[V any] struct{ m *clusterMap[V] }

func (h hasKey[V]) has(k string) bool { _, ok := h.m.get(k); return ok }
