package fleet

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
)

// timing reports whether generation gen of a pool (or a newer one) is timed.
func (p *propagationClock) timing(pool string, gen int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.pending[pool]
	return ok && c.generation >= gen
}

// observed returns a delivery's observation count and sum of seconds.
func observed(t *testing.T, h *prometheus.HistogramVec, delivery string) (uint64, float64) {
	t.Helper()
	m := &dto.Metric{}
	if err := h.WithLabelValues(delivery).(prometheus.Metric).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func TestPropagationClockPacedChange(t *testing.T) {
	h := newPropagation()
	p := newPropagationClock()
	t0 := time.Unix(1000, 0)
	p.seen("ns/pool", 4, t0)
	p.seen("ns/pool", 4, t0.Add(time.Second)) // the same generation again: the clock keeps its start
	st := func(phase string, gen int64) v1alpha1.MachinePoolSyncStatus {
		return v1alpha1.MachinePoolSyncStatus{Phase: phase, ObservedGeneration: gen}
	}
	p.delivered("ns/pool", st(v1alpha1.PhaseDrifted, 4), t0.Add(time.Second), h)      // still writing
	p.delivered("ns/pool", st(v1alpha1.PhaseInSync, 3), t0.Add(time.Second), h)       // an older generation's status
	p.delivered("ns/pool", st(v1alpha1.PhaseRollingOut, 4), t0.Add(2*time.Second), h) // all but the paced taints
	p.delivered("ns/pool", st(v1alpha1.PhaseRollingOut, 4), t0.Add(time.Hour), h)     // a later batch: nothing new
	p.delivered("ns/pool", st(v1alpha1.PhaseInSync, 4), t0.Add(2*time.Hour), h)       // the rollout's end
	if n, sum := observed(t, h, DeliveryImmediate); n != 1 || sum != 2 {
		t.Errorf("immediate: %d observations, sum %v s; want 1, 2 s", n, sum)
	}
	if n, sum := observed(t, h, DeliveryPaced); n != 1 || sum != 7200 {
		t.Errorf("paced: %d observations, sum %v s; want 1, 7200 s", n, sum)
	}
	if p.timing("ns/pool", 4) {
		t.Error("a delivered change is still timed")
	}
	p.seen("ns/a", 1, t0)
	p.seen("ns/b", 1, t0)
	p.seen("other/c", 1, t0)
	p.forget(types.NamespacedName{Namespace: "ns", Name: "c"})
	if p.timing("ns/a", 1) || p.timing("ns/b", 1) || !p.timing("other/c", 1) {
		t.Error("forgetting a namespace dropped the wrong clocks")
	}
}

// A change seen in an update event is timed to its delivery; a new pool is
// not; a change made while no replica watched is timed from the first sync
// that sees it; a dry run times nothing.
func TestPropagationObservedBySync(t *testing.T) {
	w := newWorld(t, 2, Options{}, func(*hivev1.ClusterDeployment, *hivev1.MachinePool, []client.Object) {})
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if n, _ := observed(t, w.r.Metrics.Propagation, DeliveryImmediate); n != 0 {
		t.Fatalf("a new pool's adoption was timed: %d observations", n)
	}

	mp := w.setPoolLabel(t, "b")
	w.r.SawPoolChange(mp, time.Now().Add(-3*time.Second)) // the event came 3 s before the sync
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if n, sum := observed(t, w.r.Metrics.Propagation, DeliveryImmediate); n != 1 || sum < 3 || sum > 60 {
		t.Errorf("after a seen change: %d observations, %v s; want 1 of about 3 s", n, sum)
	}
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if n, _ := observed(t, w.r.Metrics.Propagation, DeliveryImmediate); n != 1 {
		t.Errorf("a resync observed again: %d observations", n)
	}

	// A replica that starts after the change (no event) times it from its first sync.
	w.setPoolLabel(t, "c")
	w.r = &Reconciler{Hub: w.hub, Spokes: w.spokes, Recorder: w.events, Metrics: NewMetrics(prometheus.NewRegistry()), Opts: w.r.Opts}
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if n, sum := observed(t, w.r.Metrics.Propagation, DeliveryImmediate); n != 1 || sum > 60 {
		t.Errorf("a change missed while down: %d observations, %v s; want 1", n, sum)
	}
	if got := w.poolSync(t).Status.Phase; got != v1alpha1.PhaseInSync {
		t.Fatalf("phase %s", got)
	}

	// A dry run delivers nothing, so times nothing.
	dry := Options{DryRun: true}
	w.r = &Reconciler{Hub: w.hub, Spokes: w.spokes, Recorder: w.events, Metrics: NewMetrics(prometheus.NewRegistry()), Opts: dry.WithDefaults()}
	mp = w.setPoolLabel(t, "d")
	w.r.SawPoolChange(mp, time.Now())
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if n, _ := observed(t, w.r.Metrics.Propagation, DeliveryImmediate); n != 0 {
		t.Errorf("a dry run timed a change: %d observations", n)
	}
}

// Time the controller cannot act is not counted; a refused change is never timed.
func TestPropagationClockSkipsWhatTheControllerCannotDo(t *testing.T) {
	h := newPropagation()
	p := newPropagationClock()
	t0 := time.Unix(1000, 0)
	st := func(phase string) v1alpha1.MachinePoolSyncStatus {
		return v1alpha1.MachinePoolSyncStatus{Phase: phase, ObservedGeneration: 2}
	}
	p.seen("ns/pool", 2, t0)
	p.delivered("ns/pool", st(v1alpha1.PhaseUnreachable), t0.Add(time.Hour), h)
	p.delivered("ns/pool", st(v1alpha1.PhasePaused), t0.Add(2*time.Hour), h)
	p.delivered("ns/pool", st(v1alpha1.PhaseInSync), t0.Add(2*time.Hour+3*time.Second), h)
	if n, sum := observed(t, h, DeliveryImmediate); n != 1 || sum != 3 {
		t.Errorf("after 2 h unreachable and paused: %d observations, %v s; want 1 of 3 s", n, sum)
	}
	p.seen("ns/pool", 3, t0)
	p.delivered("ns/pool", v1alpha1.MachinePoolSyncStatus{Phase: v1alpha1.PhaseRefused, ObservedGeneration: 3}, t0.Add(time.Second), h)
	if p.timing("ns/pool", 3) {
		t.Error("a refused generation is still timed")
	}
}

// Every bucket config/hub's rules read of the propagation histogram (the
// SLO's threshold) is one of its bounds: a le the histogram lacks has no
// series, and its error ratio would be empty, so no alert would ever fire.
func TestPropagationRulesReadBoundsOfTheHistogram(t *testing.T) {
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	read := regexp.MustCompile(`pool_propagation_seconds_bucket\{[^}]*le="([^"]+)"`).FindAllStringSubmatch(string(raw), -1)
	if len(read) == 0 {
		t.Fatal("no rule reads a bucket of pool_propagation_seconds")
	}
	for _, m := range read {
		le, err := strconv.ParseFloat(m[1], 64)
		if err != nil || !slices.Contains(propagationBuckets, le) {
			t.Errorf("a rule reads le=%q, not a bound of %v", m[1], propagationBuckets)
		}
	}
}
