package fleet

import (
	"maps"
	gosync "sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
)

// Delivery values of hub_node_metadata_pool_propagation_seconds.
const (
	// DeliveryImmediate: everything of the change but paced NoExecute
	// taints holds on every targeted Machine and Node.
	DeliveryImmediate = "immediate"
	// DeliveryPaced: a change's paced NoExecute rollout has reached every
	// Node, so the whole change holds. A two-hour rollout is its pacing, not
	// a slow controller: the SLO reads DeliveryImmediate only.
	DeliveryPaced = "paced"
)

// propagationBuckets run from 50 ms to an hour, with 10 s (the SLO's
// default threshold) and the others an objective may take among them
// (README, "Propagation SLO").
var propagationBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

func newPropagation() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricPrefix + "pool_propagation_seconds",
		Help: "From the moment the controller saw a new MachinePool generation (a spec change of an existing pool) to the moment every targeted Machine and Node holds it; " +
			"delivery=immediate for everything but paced NoExecute taints, delivery=paced when a paced rollout of the change ends.",
		Buckets: propagationBuckets}, []string{"delivery"})
}

// propagationClock times pool changes from the moment the controller sees
// a new generation to the moment the pool's status says it holds. A change
// is seen in a MachinePool update event that moves its generation, or, for
// a change made while no replica watched (a restart, a failover), at the
// first sync that finds the pool's MachinePoolSync behind its generation.
// A new pool is no change: its Machines are provisioned, not updated, and
// how long that takes is not the controller's. Dry runs deliver nothing.
type propagationClock struct {
	mu      gosync.Mutex
	pending map[string]*pendingChange // MachinePool namespace/name
}

type pendingChange struct {
	generation int64
	since      time.Time
	// immediate: the change's immediate part was observed; what remains is
	// its paced rollout.
	immediate bool
}

func newPropagationClock() *propagationClock {
	return &propagationClock{pending: map[string]*pendingChange{}}
}

// seen starts the clock of generation gen of a pool at t, unless that
// generation (or a newer one) is already timed. A newer generation
// replaces an older one still in flight: each change is timed from its
// own sighting.
func (p *propagationClock) seen(pool string, gen int64, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.pending[pool]; ok && c.generation >= gen {
		return
	}
	p.pending[pool] = &pendingChange{generation: gen, since: t}
}

// delivered reads a pool's new status: when it says the timed generation
// holds (InSync), or holds but for a paced rollout (RollingOut), it
// observes the time since the change was seen into h. Paused and
// Unreachable restart the clock, Refused drops it; a status for another
// generation, or any other phase, leaves it running.
func (p *propagationClock) delivered(pool string, st v1alpha1.MachinePoolSyncStatus, now time.Time, h *prometheus.HistogramVec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.pending[pool]
	if !ok || c.generation != st.ObservedGeneration {
		return
	}
	took := now.Sub(c.since).Seconds()
	switch st.Phase {
	case v1alpha1.PhaseInSync:
		delivery := DeliveryImmediate
		if c.immediate {
			delivery = DeliveryPaced
		}
		h.WithLabelValues(delivery).Observe(took)
		delete(p.pending, pool)
	case v1alpha1.PhaseRollingOut:
		if !c.immediate {
			c.immediate = true
			h.WithLabelValues(DeliveryImmediate).Observe(took)
		}
	case v1alpha1.PhasePaused, v1alpha1.PhaseUnreachable:
		// Time the controller cannot act (a paused pool or cluster, a spoke
		// down or hibernating) is not its propagation: the clock starts
		// again from the last sync that found it so. HubNodeMetadataClusterUnreachable
		// covers that time.
		c.since = now
	case v1alpha1.PhaseRefused:
		// Never delivered as it is: the fix is a new generation, timed from
		// its own sighting.
		delete(p.pending, pool)
	}
}

// forgetPool drops a pool's clock (the pool is gone).
func (p *propagationClock) forgetPool(pool string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, pool)
}

// forget drops the clocks of every pool of the cluster's namespace.
func (p *propagationClock) forget(c types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	maps.DeleteFunc(p.pending, func(k string, _ *pendingChange) bool { return inNamespace(k, c.Namespace) })
}

// SawPoolChange starts the propagation clock of a pool whose generation
// moved, at the moment its update event arrives (setup.go's pool handler).
func (r *Reconciler) SawPoolChange(mp client.Object, at time.Time) {
	if r.Opts.DryRun {
		return // a dry run delivers nothing to time
	}
	r.propagation.seen(mp.GetNamespace()+"/"+mp.GetName(), mp.GetGeneration(), at)
}
