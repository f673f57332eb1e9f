package fleet

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// Metric names, all prefixed hub_node_metadata_. Cluster labels are
// "namespace/name" of the ClusterDeployment; there is no per-Node series.
// A cluster's and a pool's series are deleted when it goes.
const metricPrefix = "hub_node_metadata_"

// Reasons of hub_node_metadata_noexecute_pending_nodes.
const (
	pendingPaced         = "paced"
	pendingNodesNotReady = "nodes_not_ready"
	pendingOutsideWindow = "outside_window"
)

// Reasons of hub_node_metadata_status_write_failures_total.
const (
	statusWriteTransient = "transient"
	statusWriteRefused   = "refused"
)

// Cluster states for hub_node_metadata_clusters.
const (
	StateInSync      = "in_sync"
	StateDrifting    = "drifting"
	StateUnreachable = "unreachable"
	StateIneligible  = "ineligible"
	StatePaused      = "paused"
	StateRefused     = "refused"
)

var allStates = []string{StateInSync, StateDrifting, StateUnreachable, StateIneligible, StatePaused, StateRefused}

// Metrics are the fleet controller's metrics.
type Metrics struct {
	Clusters     *prometheus.GaugeVec     // clusters{state}
	ClusterState *prometheus.GaugeVec     // cluster_state{cluster,state} = 1 for the current state
	LastSync     *prometheus.GaugeVec     // cluster_last_sync_timestamp_seconds{cluster}
	Drifted      *prometheus.GaugeVec     // drifted_objects{cluster,pool,kind}
	PoolRefused  *prometheus.GaugeVec     // pool_refused{cluster,pool,reason} = 1 while refused
	SyncDuration *prometheus.HistogramVec // sync_duration_seconds{result}
	Patches      *prometheus.CounterVec   // patches_total{kind,result}
	Conflicts    *prometheus.CounterVec   // conflicts_total{kind}
	Overrides    *prometheus.CounterVec   // overrides_total{kind}
	SharedKept   *prometheus.CounterVec   // shared_items_kept_total{kind}
	Refusals     *prometheus.CounterVec   // refusals_total{reason}
	Contested    *prometheus.GaugeVec     // contested_objects{cluster,pool}
	Denied       *prometheus.GaugeVec     // denied_objects{cluster,pool}
	// NoExecutePending: noexecute_pending_nodes{cluster,pool,reason}
	NoExecutePending *prometheus.GaugeVec
	HeapReleases     prometheus.Counter // heap_releases_total (heapReleaser)
	// WriteOutages: clusters_in_write_outage, the clusters whose writes all
	// fail, probed one write at a time (outage.go).
	WriteOutages prometheus.Gauge
	// OutageProbes: write_outage_probes_total, the probes sent.
	OutageProbes prometheus.Counter
	// Propagation: pool_propagation_seconds{delivery} (propagation.go).
	Propagation *prometheus.HistogramVec
	// StatusWriteFailures: status_write_failures_total{reason}, the syncs
	// whose MachinePoolSync status writes failed (retryStatus).
	StatusWriteFailures *prometheus.CounterVec

	mu     sync.Mutex
	states map[string]string // cluster -> state
}

// NewMetrics registers the fleet metrics with reg (controller-runtime's
// registry in production).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Clusters: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricPrefix + "clusters",
			Help: "Clusters handled by this replica, by state: in_sync, drifting, unreachable, ineligible, paused, refused."}, []string{"state"}),
		ClusterState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricPrefix + "cluster_state",
			Help: "1 for the cluster's current state."}, []string{"cluster", "state"}),
		LastSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricPrefix + "cluster_last_sync_timestamp_seconds",
			Help: "Unix time of the cluster's last complete sync."}, []string{"cluster"}),
		Drifted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricPrefix + "drifted_objects",
			Help: "Objects of a pool that do not hold its labels and taints after the last sync, by kind (Machine, Node)."}, []string{"cluster", "pool", "kind"}),
		PoolRefused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricPrefix + "pool_refused",
			Help: "1 while a pool is refused (invalid or reserved items); nothing is written for it."}, []string{"cluster", "pool", "reason"}),
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricPrefix + "sync_duration_seconds",
			Help:    "Time to sync one cluster (read, plan, write), by result.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}}, []string{"result"}),
		Patches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "patches_total",
			Help: "Objects synced, by kind and result (Patched, Conflict, Failed, WouldPatch, Skipped)."}, []string{"kind", "result"}),
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "conflicts_total",
			Help: "409 Conflicts met while patching, by kind."}, []string{"kind"}),
		Overrides: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "overrides_total",
			Help: "Declared items that held someone else's value and were set to the pool's value, by kind."}, []string{"kind"}),
		SharedKept: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "shared_items_kept_total",
			Help: "Labels a pool stopped declaring that were left in place because someone else set them too (their managedFields name another manager), by kind."}, []string{"kind"}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "refusals_total",
			Help: "Pool syncs refused, by reason code."}, []string{"reason"}),
		Contested: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricPrefix + "contested_objects",
			Help: "Objects of a pool another writer keeps changing back; the controller stopped writing them for a while."}, []string{"cluster", "pool"}),
		Denied: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricPrefix + "denied_objects",
			Help: "Objects of a pool whose patch the spoke denied (admission webhook, 400/403/422); retried every --denied-retry."}, []string{"cluster", "pool"}),
		NoExecutePending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricPrefix + "noexecute_pending_nodes",
			Help: "Nodes of a pool that a paced rollout of its new or changed NoExecute taints has not reached yet, by why they wait: paced (their batch is not due yet), nodes_not_ready (the health gate holds the rollout), outside_window (the pool's maintenance window is closed); no series when none waits."}, []string{"cluster", "pool", "reason"}),
		HeapReleases: newHeapReleases(),
		WriteOutages: prometheus.NewGauge(prometheus.GaugeOpts{Name: metricPrefix + "clusters_in_write_outage",
			Help: "Clusters whose last writes all failed transiently (a failing admission webhook, an API server answering writes with 5xx); each is probed with one write every --outage-probe-interval until one goes through."}),
		OutageProbes: prometheus.NewCounter(prometheus.CounterOpts{Name: metricPrefix + "write_outage_probes_total",
			Help: "Probes sent to clusters in a write outage: one object written while the others wait."}),
		Propagation: newPropagation(),
		StatusWriteFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "status_write_failures_total",
			Help: "Syncs whose MachinePoolSync status writes failed, by reason: transient (retried every --outage-probe-interval at most), refused (400, 403 or 422 from the hub; retried with the controller's backoff)."}, []string{"reason"}),
		states: map[string]string{},
	}
	m.Clusters = register(reg, m.Clusters)
	m.ClusterState = register(reg, m.ClusterState)
	m.LastSync = register(reg, m.LastSync)
	m.Drifted = register(reg, m.Drifted)
	m.PoolRefused = register(reg, m.PoolRefused)
	m.SyncDuration = register(reg, m.SyncDuration)
	m.Patches = register(reg, m.Patches)
	m.Conflicts = register(reg, m.Conflicts)
	m.Overrides = register(reg, m.Overrides)
	m.SharedKept = register(reg, m.SharedKept)
	m.Refusals = register(reg, m.Refusals)
	m.Contested = register(reg, m.Contested)
	m.Denied = register(reg, m.Denied)
	m.NoExecutePending = register(reg, m.NoExecutePending)
	m.HeapReleases = register(reg, m.HeapReleases)
	m.WriteOutages = register(reg, m.WriteOutages)
	m.OutageProbes = register(reg, m.OutageProbes)
	m.Propagation = register(reg, m.Propagation)
	m.StatusWriteFailures = register(reg, m.StatusWriteFailures)
	for _, r := range []string{statusWriteTransient, statusWriteRefused} {
		m.StatusWriteFailures.WithLabelValues(r).Add(0)
	}
	for _, d := range []string{DeliveryImmediate, DeliveryPaced} {
		m.Propagation.WithLabelValues(d) // present from the start, so that rate() sees the first change
	}
	for _, s := range allStates {
		m.Clusters.WithLabelValues(s).Set(0)
	}
	// Counters start at 0 for every known label set, so that rate() sees
	// their first increment.
	for _, kind := range []string{nmsync.ResultKindMachine, nmsync.ResultKindNode} {
		for _, o := range []nmsync.Outcome{nmsync.OutcomePatched, nmsync.OutcomeConflict, nmsync.OutcomeFailed, nmsync.OutcomeWouldPatch, nmsync.OutcomeSkipped} {
			m.Patches.WithLabelValues(kind, string(o)).Add(0)
		}
		m.Conflicts.WithLabelValues(kind).Add(0)
		m.Overrides.WithLabelValues(kind).Add(0)
		m.SharedKept.WithLabelValues(kind).Add(0)
	}
	for _, code := range []string{nmsync.CodeInvalidKey, nmsync.CodeInvalidValue, nmsync.CodeInvalidEffect, nmsync.CodeReservedKey, nmsync.CodeTooMany, nmsync.CodeInvalidPacing} {
		m.Refusals.WithLabelValues(code).Add(0)
	}
	return m
}

// SetState records a cluster's state.
func (m *Metrics) SetState(cluster, state string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.states[cluster]; ok {
		if old == state {
			return
		}
		m.Clusters.WithLabelValues(old).Dec()
		m.ClusterState.DeleteLabelValues(cluster, old)
	}
	m.states[cluster] = state
	m.Clusters.WithLabelValues(state).Inc()
	m.ClusterState.WithLabelValues(cluster, state).Set(1)
}

// ForgetCluster deletes every series of a cluster.
func (m *Metrics) ForgetCluster(cluster string) {
	m.mu.Lock()
	if old, ok := m.states[cluster]; ok {
		m.Clusters.WithLabelValues(old).Dec()
		delete(m.states, cluster)
	}
	m.mu.Unlock()
	l := prometheus.Labels{"cluster": cluster}
	m.ClusterState.DeletePartialMatch(l)
	m.LastSync.DeletePartialMatch(l)
	m.Drifted.DeletePartialMatch(l)
	m.PoolRefused.DeletePartialMatch(l)
	m.Contested.DeletePartialMatch(l)
	m.Denied.DeletePartialMatch(l)
	m.NoExecutePending.DeletePartialMatch(l)
}

func (m *Metrics) forget(c types.NamespacedName) { m.ForgetCluster(c.String()) }

// ForgetPool deletes a pool's series.
func (m *Metrics) ForgetPool(cluster, pool string) {
	l := prometheus.Labels{"cluster": cluster, "pool": pool}
	m.Drifted.DeletePartialMatch(l)
	m.PoolRefused.DeletePartialMatch(l)
	m.Contested.DeletePartialMatch(l)
	m.Denied.DeletePartialMatch(l)
	m.NoExecutePending.DeletePartialMatch(l)
}

// State returns a cluster's last recorded state.
func (m *Metrics) State(cluster string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.states[cluster]
}

// ManagerCollectors are the metrics the binary exports beside NewMetrics's
// and pkg/remote's: those NewManager registers for its heap releaser and
// its standby when they run. Tests that check every name alerts and
// dashboards use list these with NewMetrics's.
func ManagerCollectors() []prometheus.Collector {
	return []prometheus.Collector{newHeapReleases(), newStandbyWarmups()}
}

// newHeapReleases makes heap_releases_total, which NewManager's heapReleaser counts in.
func newHeapReleases() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: metricPrefix + "heap_releases_total",
		Help: "Times freed heap was returned to the OS (one forced collection each) once the process had gone quiet after a burst of work."})
}

// newStandbyWarmups makes standby_warmups_total, which NewManager's standbyWarmer counts in.
func newStandbyWarmups() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: metricPrefix + "standby_warmups_total",
		Help: "Times this replica, a standby, saw the leader leave the Lease unrenewed and connected the shard's clusters while it ran out."})
}

// register registers c, or returns the collector already registered under
// the same descriptor (several managers in one process, as in tests, share
// one registry).
func register[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

func clusterKey(namespace, name string) string { return namespace + "/" + name }
