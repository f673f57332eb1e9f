package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// Dist summarises samples in milliseconds.
type Dist struct {
	N     int     `json:"n"`
	P50Ms float64 `json:"p50Ms"`
	P90Ms float64 `json:"p90Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
	MinMs float64 `json:"minMs"`
	// MeanMs is what Little's law needs (throughput = in flight / mean round trip).
	MeanMs float64 `json:"meanMs"`
}

func dist(d []time.Duration) Dist {
	if len(d) == 0 {
		return Dist{}
	}
	s := slices.Sorted(slices.Values(d))
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		i = max(0, min(i, len(s)-1))
		return ms(s[i])
	}
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	return Dist{N: len(s), P50Ms: q(0.50), P90Ms: q(0.90), P99Ms: q(0.99), MaxMs: ms(s[len(s)-1]), MinMs: ms(s[0]), MeanMs: ms(sum / time.Duration(len(s)))}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

// Memory is the controller process's memory.
type Memory struct {
	HeapInuseMiB float64 `json:"heapInuseMiB"`
	HeapAllocMiB float64 `json:"heapAllocMiB"`
	// StackInuseMiB is the goroutines' stacks, which the heap figures do not count.
	StackInuseMiB float64 `json:"stackInuseMiB"`
	// UnreturnedMiB is heap freed but not yet returned to the OS (HeapIdle − HeapReleased).
	UnreturnedMiB float64 `json:"heapUnreturnedMiB"`
	// HeapSysMiB is how far the heap has grown (HeapSys: its peak, which a burst sets);
	// RuntimeMiB the runtime's own memory beside heap and stacks, which grows with that peak.
	HeapSysMiB float64 `json:"heapGrownToMiB"`
	RuntimeMiB float64 `json:"runtimeMiB"`
	RSSMiB     float64 `json:"rssMiB"`
	// AnonMiB and FileMiB split RSS (RssAnon, RssFile): anonymous memory (heap, stacks, the
	// runtime's own) and pages of files, mostly the binary's code as it is first run.
	AnonMiB    float64 `json:"rssAnonMiB"`
	FileMiB    float64 `json:"rssFileMiB"`
	Goroutines int     `json:"goroutines"`
}

// RestartedRun is a controller started on clusters already in sync, measured once at rest.
type RestartedRun struct {
	InSync     int     `json:"inSync"`
	AllInSyncS float64 `json:"allInSyncS"`
	PeakRSSMiB float64 `json:"peakRSSMiB"`
	// CPUS is the controller's CPU from its start until every cluster was InSync, and BusyPct
	// how busy the machine's CPUs were meanwhile.
	CPUS       float64  `json:"cpuS"`
	BusyPct    float64  `json:"busyPct"`
	Memory     Memory   `json:"memory"`
	PerCluster perSpoke `json:"perCluster"`
	Skipped    string   `json:"skipped,omitempty"`
}

// perSpoke is the cost of one connected spoke: (m − the 0-spoke baseline) / spokes.
type perSpoke struct {
	HeapMiB    float64 `json:"heapMiB"`
	LiveMiB    float64 `json:"liveHeapMiB"`
	StackMiB   float64 `json:"stackMiB"`
	Unreturned float64 `json:"heapUnreturnedMiB"`
	HeapSysMiB float64 `json:"heapGrownToMiB"`
	RuntimeMiB float64 `json:"runtimeMiB"`
	RSSMiB     float64 `json:"rssMiB"`
	AnonMiB    float64 `json:"rssAnonMiB"`
	FileMiB    float64 `json:"rssFileMiB"`
	Goroutines float64 `json:"goroutines"`
}

func perSpokeOf(m, base Memory, spokes int) perSpoke {
	n := float64(spokes)
	return perSpoke{
		HeapMiB: (m.HeapInuseMiB - base.HeapInuseMiB) / n, LiveMiB: (m.HeapAllocMiB - base.HeapAllocMiB) / n,
		StackMiB: (m.StackInuseMiB - base.StackInuseMiB) / n, RSSMiB: (m.RSSMiB - base.RSSMiB) / n,
		AnonMiB: (m.AnonMiB - base.AnonMiB) / n, FileMiB: (m.FileMiB - base.FileMiB) / n, Unreturned: (m.UnreturnedMiB - base.UnreturnedMiB) / n,
		HeapSysMiB: (m.HeapSysMiB - base.HeapSysMiB) / n, RuntimeMiB: (m.RuntimeMiB - base.RuntimeMiB) / n,
		Goroutines: float64(m.Goroutines-base.Goroutines) / n,
	}
}

// Wave is one pool change on several spokes and its convergence.
type Wave struct {
	Label         string             `json:"label"`
	Spokes        int                `json:"spokes"`
	NodesPerSpoke float64            `json:"nodesPerSpoke"`
	Drifted       int                `json:"driftedObjects"`
	ConvergenceMs float64            `json:"convergenceMs"`
	PerSpokeMs    map[string]float64 `json:"perSpokeMs"`
	AuditPatches  int                `json:"auditPatches"`
	MetricPatched float64            `json:"metricPatched"`
	RemotePatches float64            `json:"remotePatchRequests"`
	PerObject     float64            `json:"requestsPerDriftedObject"`
	Writes        int                `json:"idealWrites"`
	InFlight      int                `json:"writesInFlight"`
	IdealMs       float64            `json:"idealMs"`
	Ratio         float64            `json:"ratioToIdeal"`
	// IdleIdealMs uses the round trip of one patch on an idle machine instead: what
	// convergence would be if every write in flight had a core of its own.
	IdleIdealMs float64 `json:"idleIdealMs"`
	IdleRatio   float64 `json:"ratioToIdleIdeal"`
	// ControllerCPUs is the controller process's CPU time over the wave; SpokeRateWaitS the
	// time its spoke requests waited in client-side rate limiters (summed over requests).
	ControllerCPUs float64 `json:"controllerCPUSeconds"`
	SpokeRateWaitS float64 `json:"spokeRateLimiterWaitS"`
	// Propagation is the controller's propagation histogram over the wave,
	// beside the bench's own measurement of it.
	Propagation *PropagationCheck `json:"propagation,omitempty"`
}

// Point is one fleet size of the cost-growth table.
type Point struct {
	Dimension string   `json:"dimension"`
	Wave      Wave     `json:"wave"`
	Memory    Memory   `json:"memory"`
	PerSpoke  perSpoke `json:"perSpoke"`
	// Restarted is a controller started again on the point's spokes once they are in sync
	// (after the wave), so that it connects and writes nothing (Nodes dimension only).
	Restarted         *Memory   `json:"restartedInSync,omitempty"`
	PerSpokeRestarted *perSpoke `json:"perSpokeRestartedInSync,omitempty"`
	// Goroutines are the process's goroutines by what they run.
	Goroutines []Share `json:"goroutinesBy"`
}

// Goal is one figure with its goal.
type Goal struct {
	Figure   string `json:"figure"`
	Measured string `json:"measured"`
	Goal     string `json:"goal"`
	Pass     bool   `json:"pass"`
	Skipped  bool   `json:"skipped,omitempty"`
	// Reported marks a figure the issues ask to report beside a goal, not to meet: its row
	// reads REPORTED, and Pass is not set.
	Reported bool   `json:"reported,omitempty"`
	Note     string `json:"note,omitempty"`
}

// RestartCase is one start of the controller on the simulated fleet.
type RestartCase struct {
	// Seconds from the process start (the leader's SIGKILL for a failover) to
	// every cluster InSync in the controller's metrics.
	Seconds float64 `json:"seconds"`
	InSync  int     `json:"inSync"`
	// Hub is what that process sent the hub (its audit log) from its start (the
	// kill) until it had been quiet for SettleS after every cluster was
	// InSync; PerCluster and WritesPerCluster leave out watches and the Lease.
	Hub              HubCounts `json:"hubRequests"`
	PerCluster       float64   `json:"hubRequestsPerCluster"`
	WritesPerCluster float64   `json:"hubWritesPerCluster"`
	SettleS          float64   `json:"settleS"`
	// ControllerCPUS is the controller's CPU time from its start (the kill) to all InSync;
	// MachineBusyPct is how busy the machine's CPUs were over the same span (the spokes' API
	// servers and etcd share them).
	ControllerCPUS float64 `json:"controllerCPUSeconds"`
	MachineBusyPct float64 `json:"machineBusyPercent"`
	// APIServersCPUS is the CPU time of all the fleet's API servers over the same span, and
	// HubCPUS the hub's share of it: with the controller's, where the span's CPU went.
	APIServersCPUS float64 `json:"apiServersCPUSeconds"`
	HubCPUS        float64 `json:"hubAPIServerCPUSeconds"`
	// PeakRSSMiB is the process's largest RSS until every cluster was InSync (read once a
	// scrape): the figure a pod's memory limit must hold, with the shipped soft limit.
	PeakRSSMiB float64 `json:"peakRSSMiB"`
	// Spoke is what the spokes' audit logs recorded of the hub's credential over the same
	// span (the probes, lists and watches of the connects); SpokePerCluster
	// is all of it per simulated cluster.
	Spoke           AuditCounts `json:"spokeRequests"`
	SpokePerCluster float64     `json:"spokeRequestsPerCluster"`
	// LeaseTakeoverS is when the standby became leader, after the kill.
	LeaseTakeoverS float64 `json:"leaseTakeoverS,omitempty"`
	// ConnectingS is when the standby began connecting (its first kubeconfig Secret read),
	// after the kill: once it had seen the Lease unrenewed for --standby-warm-after.
	ConnectingS float64 `json:"connectingS,omitempty"`
	// Standby is what the standby sent before the kill (its caches: lists
	// and watches, not per cluster).
	Standby *HubCounts `json:"standbyBeforeKill,omitempty"`
}

// DetectCase is one dead spoke.
type DetectCase struct {
	Cluster string `json:"cluster"`
	// MetricS is the time from the fault to cluster_state{state="unreachable"},
	// StatusS to its MachinePoolSync's phase Unreachable (0: not seen).
	MetricS float64 `json:"metricS"`
	StatusS float64 `json:"statusS"`
	Reason  string  `json:"reason"`
}

// Report is everything one run measured.
type Report struct {
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  string    `json:"machine"`
	Code     string    `json:"code"`
	Config   struct {
		Spokes, Nodes, ReactionSamples, SimClusters, SimRealSpokes, SimNodes, MaxRealSpokes int
		Idle, Delay                                                                         string
		// MemorySettle is how long a controller ran on, every cluster InSync, before its
		// memory was measured (Config.MemorySettle).
		MemorySettle string
		// StartProfile is how long the first start and the restart ran under the CPU
		// profiler (Config.StartProfile).
		StartProfile string
		// SimHeartbeat is how often each Node posted its status in the in-sync window
		// (Config.SimHeartbeat).
		SimHeartbeat string
		// ReactionHeartbeat and ReactionFastHeartbeat are how often the reaction spokes' Nodes
		// posted while the samples ran (Config.ReactionHeartbeat, Config.ReactionFastHeartbeat).
		ReactionHeartbeat, ReactionFastHeartbeat string
		GrowthSpokes, GrowthNodes                []int
		GrowthNodesSpokes                        int
		HubQPS                                   float64
		HubBurst                                 int
		SpokeQPS                                 float64
		SpokeBurst                               int
		MaxConcurrentClusters, WritesPerCluster  int
		// GOMEMLIMIT of the controller process: hub-controller sets it to MemoryLimitRatio of
		// its container's memory limit (DeploymentMemoryLimit, in bytes, from config/hub's
		// Deployment), and the benchmark passes the same.
		GOMEMLIMIT            string
		DeploymentMemoryLimit int64   `json:"deploymentMemoryLimitBytes"`
		MemoryLimitRatio      float64 `json:"memoryLimitRatio"`
		// DeployArgs are the flags config/hub's Deployment gives the controller, which every
		// controller process of the run gets; Overrides the flags this run changed.
		DeployArgs []string `json:"deployArgs"`
		// DeployEnv is the environment it gives the controller (KEY=VALUE), which every
		// controller process gets too.
		DeployEnv []string `json:"deployEnv"`
		Overrides []string `json:"overrides"`
		// ResyncPeriod is the --resync-period those args give (the binary's default if none).
		ResyncPeriod time.Duration `json:"resyncPeriodNs"`
		// SLOObjectiveS is the propagation SLO's threshold in config/hub's PrometheusRule
		// (the le of its error_ratio rules), in seconds.
		SLOObjectiveS float64 `json:"sloObjectiveS"`
	} `json:"config"`
	Setup struct {
		FleetStartS float64 `json:"fleetStartS"`
		PoolsS      float64 `json:"poolsS"`
		AdoptionS   float64 `json:"adoptionS"`
	} `json:"setup"`
	Baseline struct {
		PatchRTT      Dist    `json:"patchRTT"`
		WatchHop      Dist    `json:"watchHop"`
		DirectFloorMs float64 `json:"directWriteFloorMs"`
		DirectWrites  int     `json:"directWrites"`
		// LoadedRTT is the round trip of each direct-floor write, LoadedInFlight of them
		// in flight: the patch round trip at the concurrency the ideal assumes.
		LoadedRTT      Dist `json:"loadedPatchRTT"`
		LoadedInFlight int  `json:"loadedInFlight"`
		// ControllerCPUs is the controller's CPU time during the direct floor (it watches,
		// and re-reads after each of those writes, writing nothing).
		ControllerCPUs float64 `json:"controllerCPUSecondsDuringFloor"`
	} `json:"baseline"`
	Convergence Wave `json:"convergence"`
	Idle        struct {
		WindowS             float64        `json:"windowS"`
		Spokes              int            `json:"spokes"`
		Audit               AuditCounts    `json:"audit"`
		Writes              int            `json:"writes"`
		Reads               int            `json:"reads"`
		ReadsPerSpokePerMin float64        `json:"readsPerSpokePerMinute"`
		RemoteByVerb        map[string]int `json:"remoteRequestsByVerb"`
		Patched             float64        `json:"metricPatched"`
		// Resync is the idle controller's --resync-period (an override).
		Resync string `json:"resync"`
		// SpokePerHour is spoke requests per spoke-hour by verb (audit logs).
		SpokePerHour map[string]float64 `json:"spokeRequestsPerSpokeHour"`
		// Hub is the idle controller's hub requests in the window (the hub's audit log).
		Hub HubCounts `json:"hubRequests"`
		// Reconciles of the Clusters in the window (controller_runtime_reconcile_total).
		Reconciles float64 `json:"reconciles"`
		Clusters   int     `json:"clusters"`
		// HeapReleases is heap_releases_total's rise in the window: the heap releaser must not
		// fire at rest (each release is a collection).
		HeapReleases float64 `json:"heapReleases"`
		Skipped      string  `json:"skipped,omitempty"`
	} `json:"idle"`
	Reaction struct {
		NewNode Dist `json:"newNode"`
		// NewNodeTrace: where NewNode's time goes.
		NewNodeTrace NewNodeTrace `json:"newNodeTrace"`
		BornInSync   int          `json:"newNodeBornInSync"`
		Removal      Dist         `json:"removal"`
		Unrepaired   int          `json:"unrepaired"`
		SpokesUsed   int          `json:"spokesUsed"`
		Concurrency  int          `json:"concurrency"`
		// Heartbeats is what the spokes' Nodes posted while the samples ran
		// (Config.ReactionHeartbeat; the first FastSpokes' every Config.ReactionFastHeartbeat);
		// WindowS how long the samples ran, ControllerCPUPercent the controller's CPU over it
		// (its reactions and the posts' events), RSSMiB its RSS at the end.
		Heartbeats           heartbeatTally `json:"heartbeats"`
		FastSpokes           int            `json:"fastSpokes"`
		WindowS              float64        `json:"windowS"`
		ControllerCPUPercent float64        `json:"controllerCPUPercent"`
		RSSMiB               float64        `json:"rssMiB"`
	} `json:"reaction"`
	Isolation struct {
		Degraded     []string  `json:"degraded"`
		Healthy      int       `json:"healthy"`
		BaselinesMs  []float64 `json:"baselinesMs"`
		BaselineMs   float64   `json:"baselineMs"`
		BlackHoleMs  float64   `json:"blackHoleMs"`
		DelayMs      float64   `json:"delayMs"`
		BlackHoleX   float64   `json:"blackHoleRatio"`
		DelayX       float64   `json:"delayRatio"`
		HealedAfterS float64   `json:"degradedConvergedAfterHealS"`
		Skipped      string    `json:"skipped,omitempty"`
	} `json:"isolation"`
	Memory struct {
		Idle0    Memory   `json:"zeroSpokes"`
		At       Point    `json:"atK"`
		PerSpoke perSpoke `json:"perSpoke"`
		// PerConnection and PerNode split a spoke's cost by a least-squares line through
		// the points of the Nodes dimension (per spoke against Nodes per spoke).
		PerConnection  perSpoke `json:"perConnection"`
		PerNode        perSpoke `json:"perNode"`
		K              int      `json:"k"`
		NodesPerSpoke  float64  `json:"nodesPerSpoke"`
		MaxRealTarget  int      `json:"maxRealTarget"`
		MaxRealReached int      `json:"maxRealReached"`
		MaxRealInSync  int      `json:"maxRealInSync"`
		MaxRealMemory  Memory   `json:"maxRealMemory"`
		MaxRealNote    string   `json:"maxRealNote,omitempty"`
	} `json:"memory"`
	Sim struct {
		Clusters         int     `json:"clusters"`
		RealSpokes       int     `json:"realSpokes"`
		NodesPerCluster  int     `json:"nodesPerCluster"`
		CacheNodes       int     `json:"nodesInEachCache"`
		CacheMachines    int     `json:"machinesInEachCache"`
		CacheMachineSets int     `json:"machineSetsInEachCache"`
		SetupS           float64 `json:"setupS"`
		InSync           int     `json:"inSync"`
		AllInSyncS       float64 `json:"allInSyncS"`
		Memory           Memory  `json:"memory"`
		HeapPerCD        float64 `json:"heapPerClusterMiB"`
		RSSPerCD         float64 `json:"rssPerClusterMiB"`
		RSSAt2000MiB     float64 `json:"rssAt2000MiB"`
		Extrapolated     bool    `json:"extrapolated"`
		NodesLabelled    int     `json:"nodesLabelled"`
		HubRequests      float64 `json:"hubRequests"`
		SpokeRateWaitS   float64 `json:"spokeRateLimiterWaitS"`
		// HeapReleases is how often the controller had returned freed heap to the OS by the
		// end of the step (heap_releases_total).
		HeapReleases float64 `json:"heapReleases"`
		// SteadyCPUPercent is the controller's CPU use over SteadyS seconds once every
		// cluster is in sync: with GOMEMLIMIT near the heap, a thrashing GC would show here.
		SteadyCPUPercent float64 `json:"steadyCPUPercent"`
		SteadyS          float64 `json:"steadyS"`
		// SteadyReconciles counts the fleet controller's reconciles in that window: the
		// resyncs of clusters in sync (controller_runtime_reconcile_total).
		SteadyReconciles float64 `json:"steadyReconciles"`
		// SteadyCPU is where that CPU went, from a CPU profile of the same window.
		SteadyCPU []Share `json:"steadyCPU"`
		// Heartbeats is what the Nodes posted in that window (Config.SimHeartbeat).
		Heartbeats heartbeatTally `json:"heartbeats"`
		// Heap is the live heap by holder, from the heap profile taken at the end (MiB).
		Heap    []Share `json:"heapMiB"`
		Skipped string  `json:"skipped,omitempty"`
	} `json:"sim"`
	// SimLarge is the simulated fleet again, on fewer real spokes, so each cache is larger.
	SimLarge struct {
		Clusters   int     `json:"clusters"`
		RealSpokes int     `json:"realSpokes"`
		CacheNodes int     `json:"nodesInEachCache"`
		SetupS     float64 `json:"setupS"`
		InSync     int     `json:"inSync"`
		AllInSyncS float64 `json:"allInSyncS"`
		// PeakRSSMiB is the largest RSS seen while the clusters synced (sampled once a second).
		PeakRSSMiB float64 `json:"peakRSSMiB"`
		Memory     Memory  `json:"memory"`
		// NodesLabelled counts the Nodes holding their pool's label at the end.
		NodesLabelled int `json:"nodesLabelled"`
		// PerCluster is Memory less the 0-spoke baseline, per cluster.
		PerCluster perSpoke `json:"perCluster"`
		// Unlimited is a second controller, run without GOMEMLIMIT, adopting the same clusters
		// again (their Machines and Nodes made again unlabelled, UnlimitedSetupS): what a
		// connected 100-Node spoke costs at a shard's scale after its adoption, the first use
		// of every code path (TLS, HTTP/2, decoders) and the adoption's peak spread over
		// thousands. UnlimitedNodesLabelled counts the Nodes it labelled.
		Unlimited              *RestartedRun `json:"unlimited,omitempty"`
		UnlimitedSetupS        float64       `json:"unlimitedSetupS"`
		UnlimitedNodesLabelled int           `json:"unlimitedNodesLabelled"`
		// Restarted and UnlimitedRestarted are controllers restarted on the same clusters in
		// sync, with the shipped soft limit and without: a restart's peak beside the adoption's.
		Restarted          *RestartedRun `json:"restarted,omitempty"`
		UnlimitedRestarted *RestartedRun `json:"unlimitedRestarted,omitempty"`
		Skipped            string        `json:"skipped,omitempty"`
	} `json:"simLarge"`
	Restart struct {
		Clusters int `json:"clusters"`
		// Others are the other (paused) ClusterDeployments on the hub.
		Others     int         `json:"otherClusters"`
		FirstStart RestartCase `json:"firstStart"`
		Restart    RestartCase `json:"restart"`
		Failover   RestartCase `json:"failover"`
		Skipped    string      `json:"skipped,omitempty"`
	} `json:"restart"`
	Detection struct {
		// Cases by fault: black-holed, killed, frozen.
		Cases map[string]*DetectCase `json:"cases"`
		// RecoveredS is the time from healing to every cluster InSync again.
		RecoveredS float64 `json:"recoveredS"`
		Skipped    string  `json:"skipped,omitempty"`
	} `json:"detection"`
	Capacity CapacityRun `json:"capacity"`
	Growth   []Point     `json:"growth"`
	Goals    []Goal      `json:"goals"`
	Notes    []string    `json:"notes"`
}

func (r *Report) note(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

func ratioMiss(measured, goal float64) string {
	if measured <= goal {
		return ""
	}
	return fmt.Sprintf("missed by %.2f× (%.3g%% over)", measured/goal, (measured/goal-1)*100)
}

// Judge fills Goals from the figures.
func (r *Report) Judge() {
	r.Goals = nil
	add := func(g Goal) { r.Goals = append(r.Goals, g) }
	c := r.Convergence
	g := Goal{Figure: "Write cost: requests per drifted object (pool change, audit logs)", Goal: "1.00 (ideal)",
		Measured: fmt.Sprintf("%.2f (%d patches / %d objects)", c.PerObject, c.AuditPatches, c.Drifted), Pass: c.Drifted > 0 && c.PerObject <= 1.0001}
	if !g.Pass && c.PerObject > 0 {
		g.Note = fmt.Sprintf("%.2f extra requests per object", c.PerObject-1)
	}
	add(g)
	r.judgeRest(add)
	g = Goal{Figure: fmt.Sprintf("Convergence %d spokes × %.0f Nodes vs ideal", c.Spokes, c.NodesPerSpoke), Goal: "≤ 1.5× ideal (at ≥ 20 × 50)",
		Measured: fmt.Sprintf("%.0f ms vs ideal %.0f ms = %.2f× (RTT measured at %d writes in flight)", c.ConvergenceMs, c.IdealMs, c.Ratio, r.Baseline.LoadedInFlight), Pass: c.Ratio > 0 && c.Ratio <= 1.5}
	g.Note = ratioMiss(c.Ratio, 1.5)
	if c.IdleIdealMs > 0 {
		g.Note = strings.TrimPrefix(g.Note+fmt.Sprintf("; against the idle-RTT ideal (%.0f ms, one write at a time on an idle machine) %.0f× — not reachable on %s, see §2", c.IdleIdealMs, c.IdleRatio, r.Machine), "; ")
	}
	if c.Spokes < 20 || c.NodesPerSpoke < 50 {
		g.Note += "; below the goal's size"
	}
	add(g)
	if pc := c.Propagation; pc != nil {
		add(Goal{Figure: "Propagation histogram (pool_propagation_seconds p99) vs the bench's own p99, same wave", Goal: "within one bucket, every change counted",
			Measured: fmt.Sprintf("histogram %.0f ms in %s, bench %.0f ms in %s (%d buckets apart); %d of %d changes counted", pc.HistogramP99Ms, pc.HistogramBucket, pc.MeasuredP99Ms, pc.MeasuredBucket, pc.BucketsApart, pc.Observed, pc.Pools),
			Pass:     pc.Pools > 0 && pc.Observed == pc.Pools && pc.BucketsApart <= 1})
		g := Goal{Figure: "Pool changes within the propagation SLO's objective, same wave (delivery=immediate)",
			Goal:     fmt.Sprintf("≥ 99%% within %g s (config/hub's PrometheusRule)", pc.ObjectiveS),
			Measured: fmt.Sprintf("%d of %d changes within %g s (%.0f%%)", pc.WithinObjective, pc.Observed, pc.ObjectiveS, 100*safeDiv(float64(pc.WithinObjective), float64(pc.Observed))),
			Pass:     pc.ObjectiveS > 0 && pc.Observed > 0 && pc.Observed == pc.Pools && float64(pc.WithinObjective) >= 0.99*float64(pc.Observed)}
		g.Note = fmt.Sprintf("%d pools of %.0f Nodes changed at once, on spokes that share this machine; a shard's change is one pool, on a spoke of its own", pc.Pools, c.NodesPerSpoke)
		add(g)
	}
	beats := r.reactionHeartbeatsNote()
	for _, x := range []struct {
		name   string
		d      Dist
		goalMs float64
		how    string
	}{{"Reaction: new Node linked to a pool's Machine", r.Reaction.NewNode, goalNewNodeP99Ms, "from the Node's creation: §3 says where the time goes"},
		{"Reaction: out-of-band label removal", r.Reaction.Removal, goalRemovalP99Ms, ""}} {
		g := Goal{Figure: x.name + " (p50 / p99)", Goal: fmt.Sprintf("p99 ≤ %s", fmtMs(x.goalMs)),
			Measured: fmt.Sprintf("%.0f / %.0f ms (n=%d)", x.d.P50Ms, x.d.P99Ms, x.d.N), Pass: x.d.N > 0 && x.d.P99Ms <= x.goalMs && r.Reaction.Unrepaired == 0}
		g.Note = joinNotes(beats, x.how, ratioMiss(x.d.P99Ms, x.goalMs), ifStr(x.d.N < 50, "fewer than 50 samples"),
			ifStr(r.Reaction.Unrepaired > 0, fmt.Sprintf("%d samples unrepaired within 30 s", r.Reaction.Unrepaired)))
		add(g)
	}
	s := r.Sim
	rssGoal := fmt.Sprintf("≤ %d MiB (the Deployment's limit: %.0f MiB)", goalRSS2000MiB, r.deploymentLimitMiB())
	if s.Skipped != "" {
		add(Goal{Figure: "Hub RSS at 2,000 clusters", Goal: rssGoal, Skipped: true, Note: s.Skipped})
	} else {
		g := Goal{Figure: fmt.Sprintf("Hub RSS at 2,000 clusters (simulated: %d CDs on %d real spokes)", s.Clusters, s.RealSpokes), Goal: rssGoal,
			Measured: fmt.Sprintf("%.0f MiB RSS, %.0f MiB heap; %d/%d InSync", s.Memory.RSSMiB, s.Memory.HeapInuseMiB, s.InSync, s.Clusters), Pass: s.RSSAt2000MiB > 0 && s.RSSAt2000MiB <= goalRSS2000MiB && s.InSync == s.Clusters}
		if s.Extrapolated {
			g.Measured += fmt.Sprintf("; extrapolated to 2,000: %.0f MiB", s.RSSAt2000MiB)
			g.Note = "extrapolated linearly from a smaller simulation"
		}
		g.Note = strings.TrimPrefix(g.Note+"; "+r.gomemlimitNote(), "; ")
		if s.RSSAt2000MiB > goalRSS2000MiB {
			g.Note = strings.TrimPrefix(g.Note+"; "+ratioMiss(s.RSSAt2000MiB, goalRSS2000MiB), "; ")
		}
		if s.InSync < s.Clusters {
			g.Note = strings.TrimPrefix(g.Note+fmt.Sprintf("; only %d of %d InSync", s.InSync, s.Clusters), "; ")
		}
		add(g)
		// The goal: the fleet at rest's budget, plus the capacity goal's per-event budget for
		// each Node event of the window (a busy shard's Nodes post about once a minute).
		cpuGoal := fmt.Sprintf("≤ %.0f%% of one core, plus %.0f µs for each Node event (the capacity goal's)", goalSteadyCPUPercent, 1e6/goalEventsPerCore)
		if s.SteadyS == 0 {
			add(Goal{Figure: "Controller CPU at 2,000 clusters in sync", Goal: cpuGoal, Skipped: true, Note: "not measured (-sim-steady 0, or the controller could not be scraped)"})
		} else {
			// Every cluster's resync is in the window if it outlasts the longest jittered
			// period, and the reconciles in it show they ran: one a cluster at least.
			period := r.Config.ResyncPeriod
			window := time.Duration(s.SteadyS * float64(time.Second))
			spans := window >= time.Duration(float64(period)*1.1) && s.SteadyReconciles >= float64(s.Clusters)
			hb := s.Heartbeats
			eventsPerS := float64(hb.Events) / s.SteadyS
			goalPct := goalSteadyCPUPercent + 100*eventsPerS/goalEventsPerCore
			g := Goal{Figure: fmt.Sprintf("Controller CPU at %d clusters in sync (simulated)", s.Clusters), Goal: cpuGoal,
				Measured: fmt.Sprintf("%.1f%% of one core over %s, GC included; %.0f reconciles in it", s.SteadyCPUPercent, window, s.SteadyReconciles),
				Pass:     s.SteadyCPUPercent > 0 && s.SteadyCPUPercent <= goalPct && s.InSync == s.Clusters && s.Clusters >= shardClusters && spans && hb.Posted > 0}
			if hb.Posted > 0 {
				g.Measured += fmt.Sprintf("; Node heartbeats: each of the spokes' Nodes posted a real worker's status every %s, %.0f watch events a second at the controller (a Node of %.1f KiB): at most %.0f µs of CPU an event (the window's CPU, resyncs included, over its events); the goal for that rate: %.1f%%",
					r.Config.SimHeartbeat, eventsPerS, float64(hb.NodeBytes)/1024, 1e6*safeDiv(s.SteadyCPUPercent/100, eventsPerS), goalPct)
			}
			how := fmt.Sprintf("the window opens once all are InSync and outlasts the resync period (%s ±10%%), and held a reconcile a cluster or more: each cluster's safety-net resync is in it", period)
			if !spans {
				how = fmt.Sprintf("the window (or its reconciles, fewer than the clusters) does not span the resync period (%s ±10%%): not every resync is in it, so this does not show the goal met", period)
			}
			g.Note = joinNotes(how+" (§4 says where the CPU goes)", r.gomemlimitNote(), ratioMiss(s.SteadyCPUPercent, goalPct),
				ifStr(s.Clusters < shardClusters, "below the goal's 2,000 clusters"),
				ifStr(hb.Posted == 0, "no Node posted its status in the window (-sim-heartbeat 0, or every post failed): a kubelet posts its Node's at least every 5 minutes, so this does not show the goal met"))
			add(g)
		}
	}
	largeGoal := fmt.Sprintf("all InSync, RSS below the Deployment's limit (%.0f MiB) throughout", r.deploymentLimitMiB())
	if sl := r.SimLarge; sl.Skipped != "" {
		add(Goal{Figure: "Hub memory at 2,000 clusters with larger caches", Goal: largeGoal, Skipped: true, Note: sl.Skipped})
	} else {
		g := Goal{Figure: fmt.Sprintf("Hub memory at %d clusters with larger caches (simulated: %d CDs on %d real spokes, %d Nodes in each cache)", sl.Clusters, sl.Clusters, sl.RealSpokes, sl.CacheNodes),
			Goal:     largeGoal,
			Measured: fmt.Sprintf("%d/%d InSync after %.0f s; peak RSS %.0f MiB (at the end %.0f MiB RSS, %.0f MiB heap in use, %.0f MiB live)", sl.InSync, sl.Clusters, sl.AllInSyncS, sl.PeakRSSMiB, sl.Memory.RSSMiB, sl.Memory.HeapInuseMiB, sl.Memory.HeapAllocMiB),
			Pass:     sl.InSync == sl.Clusters && sl.PeakRSSMiB > 0 && sl.PeakRSSMiB < r.deploymentLimitMiB()}
		g.Note = r.gomemlimitNote() + "; RSS sampled once a second"
		add(g)
	}
	m := r.Memory
	if m.MaxRealTarget == 0 {
		add(Goal{Figure: "Real spokes one machine holds", Goal: "≥ 50", Skipped: true, Note: "skipped: -max-real-spokes 0"})
	} else {
		add(Goal{Figure: "Real spokes one machine holds", Goal: "≥ 50",
			Measured: fmt.Sprintf("%d started, %d InSync (target %d)", m.MaxRealReached, m.MaxRealInSync, m.MaxRealTarget), Pass: m.MaxRealInSync >= 50, Note: m.MaxRealNote})
	}
	// Goal 1 is judged at a shard's scale when that run was made: at 10 spokes, what the first
	// spokes cost once (code paged in, the runtime's metadata, the spans of an adoption's peak,
	// which the clusters reconciled at once set: min(spokes, --max-concurrent-clusters)) is
	// divided by 10 only.
	sl := r.SimLarge
	atScale := sl.Skipped == "" && sl.Unlimited != nil && sl.Unlimited.Skipped == "" && sl.Clusters >= shardClusters
	perSpoke := Goal{Figure: fmt.Sprintf("Hub memory per connected spoke (%d spokes × %.0f Nodes vs 0)", m.K, m.NodesPerSpoke),
		Goal:     fmt.Sprintf("≤ %.1f MiB RSS per 100-Node spoke (reference: Cluster API ≈ 1.3 MiB per cluster)", goalRSSPerSpokeMiB),
		Measured: fmt.Sprintf("%.2f MiB RSS (%.2f anonymous, %.2f file pages): %.2f MiB heap in use (%.2f live), %.3f MiB stacks, %.1f goroutines", m.PerSpoke.RSSMiB, m.PerSpoke.AnonMiB, m.PerSpoke.FileMiB, m.PerSpoke.HeapMiB, m.PerSpoke.LiveMiB, m.PerSpoke.StackMiB, m.PerSpoke.Goroutines),
		Pass:     m.PerSpoke.RSSMiB > 0 && m.PerSpoke.RSSMiB <= goalRSSPerSpokeMiB}
	if m.PerSpoke.RSSMiB > goalRSSPerSpokeMiB {
		perSpoke.Note = ratioMiss(m.PerSpoke.RSSMiB, goalRSSPerSpokeMiB)
	}
	if atScale {
		perSpoke.Reported, perSpoke.Pass = true, false
		perSpoke.Goal = fmt.Sprintf("reported beside the goal of ≤ %.1f MiB RSS per 100-Node spoke, which the next row judges at a shard's scale", goalRSSPerSpokeMiB)
		perSpoke.Note = ""
		if m.PerSpoke.RSSMiB > goalRSSPerSpokeMiB {
			perSpoke.Note = fmt.Sprintf("%.2f× the goal at %d spokes: what the first spokes cost once (code paged in, %.2f MiB a spoke of file pages; the runtime's metadata and the spans of the adoption's peak, which the clusters reconciled at once set) is divided by %d only", m.PerSpoke.RSSMiB/goalRSSPerSpokeMiB, m.K, m.PerSpoke.FileMiB, m.K)
		}
	}
	if r := m.At.PerSpokeRestarted; r != nil {
		perSpoke.Note = joinNotes(perSpoke.Note, fmt.Sprintf("measured after adopting the spokes (%d writes); restarted on them in sync (no writes): %.2f MiB RSS, %.2f heap in use (%.2f live), %.3f stacks (§4)",
			m.At.Wave.Drifted, r.RSSMiB, r.HeapMiB, r.LiveMiB, r.StackMiB))
	}
	add(perSpoke)
	if sl.Skipped == "" && sl.Unlimited != nil {
		u := sl.Unlimited
		g := Goal{Figure: fmt.Sprintf("Hub memory per connected spoke at a shard's scale, after adopting them (%d simulated clusters, %d Nodes in each cache, vs 0)", sl.Clusters, sl.CacheNodes),
			Goal: fmt.Sprintf("≤ %.1f MiB RSS per 100-Node spoke", goalRSSPerSpokeMiB), Skipped: u.Skipped != "", Note: u.Skipped}
		if !g.Skipped {
			pc := u.PerCluster
			adopted := u.InSync == sl.Clusters && sl.UnlimitedNodesLabelled == sl.Clusters*max(r.Config.SimNodes, 1)
			g.Measured = fmt.Sprintf("%.3f MiB RSS (%.3f anonymous): %.3f MiB heap in use (%.3f live), %.3f MiB stacks, %.1f goroutines", pc.RSSMiB, pc.AnonMiB, pc.HeapMiB, pc.LiveMiB, pc.StackMiB, pc.Goroutines)
			g.Pass = pc.RSSMiB > 0 && pc.RSSMiB <= goalRSSPerSpokeMiB && adopted && sl.CacheNodes >= 100 && sl.Clusters >= shardClusters
			g.Note = joinNotes(ratioMiss(pc.RSSMiB, goalRSSPerSpokeMiB),
				ifStr(!adopted, fmt.Sprintf("not a whole adoption: %d of %d InSync, %d Nodes labelled", u.InSync, sl.Clusters, sl.UnlimitedNodesLabelled)),
				ifStr(sl.CacheNodes < 100, "caches of fewer than 100 Nodes"),
				ifStr(sl.Clusters < shardClusters, fmt.Sprintf("fewer clusters than a shard's %d", shardClusters)),
				fmt.Sprintf("GOMEMLIMIT unset (the headline run; with the shipped soft limit, the first adoption's end: %.3f MiB RSS, §4); each simulated cluster is its own TLS connection, watches and %d-Node cache, as a real spoke is to the controller; a controller adopting them (their Machines and Nodes made again unlabelled; it labelled %d Nodes, and every cluster InSync holds its Machines labelled too), measured %s after all %d were InSync; its RSS peaked at %.0f MiB while adopting them%s; the 0-spoke baseline ran with the soft limit, which does not bind at its size", sl.PerCluster.RSSMiB, sl.CacheNodes, sl.UnlimitedNodesLabelled, r.Config.MemorySettle, sl.Clusters, u.PeakRSSMiB,
					ifStr(u.PeakRSSMiB >= r.deploymentLimitMiB(), fmt.Sprintf(", above the Deployment's limit (%.0f MiB): the shipped soft limit is what keeps a shard's adoption below it", r.deploymentLimitMiB()))))
		}
		add(g)
	}
	if sl.Skipped == "" && sl.Restarted != nil {
		add(r.peaksRow())
	}
	r.judgeCapacity(add)
	iso := r.Isolation
	if iso.Skipped != "" {
		add(Goal{Figure: "Isolation", Goal: "≤ 1.1×", Skipped: true, Note: iso.Skipped})
	} else {
		for _, x := range []struct {
			name string
			v, x float64
		}{{"black-holed", iso.BlackHoleMs, iso.BlackHoleX}, {fmt.Sprintf("answering after %s", r.Config.Delay), iso.DelayMs, iso.DelayX}} {
			add(Goal{Figure: fmt.Sprintf("Isolation: %d healthy spokes while %d are %s", iso.Healthy, len(iso.Degraded), x.name), Goal: "≤ 1.1× all-healthy",
				Measured: fmt.Sprintf("%.0f ms vs %.0f ms = %.2f×", x.v, iso.BaselineMs, x.x), Pass: x.x > 0 && x.x <= 1.1, Note: ratioMiss(x.x, 1.1)})
		}
	}
}

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# Benchmarks\n\n")
	p("Produced by `%s` on %s (%s) from %s, in %s.\n\n", r.Command, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Machine, r.Code, r.Duration)
	p("Spokes are real kube-apiservers over one etcd (internal/localfleet), all on this one machine: every API server, etcd, the controller and the benchmark's own watchers compete for the same cores, so timings are noisy from run to run. The controller runs as its own process (`hack/bench controller`: the same `fleet.NewManager` setup as `hub-controller run`, production defaults: MaxConcurrentClusters %d, WritesPerCluster %d, spoke QPS %s / burst %d; hub client QPS %s / burst %d; %s). The benchmark reads the controller's metrics uncompressed (it scrapes up to five times a second while it waits, where Prometheus scrapes every 30 s; gzipped, each of those scrapes could build a gzip writer in the process being measured).\n\n",
		r.Config.MaxConcurrentClusters, r.Config.WritesPerCluster, qps(r.Config.SpokeQPS, remote.DefaultQPS), r.Config.SpokeBurst, qps(r.Config.HubQPS, 0), r.Config.HubBurst, r.gomemlimitText())
	overrides := slices.Clone(r.Config.Overrides)
	if r.Idle.Resync != "" {
		overrides = append(overrides, "--resync-period="+r.Idle.Resync+" for the at-rest step only (§1a)")
	}
	p("Every controller process gets the args of config/hub's Deployment (`%s`; the Lease namespace is the one a pod takes from its own, the bind addresses are the benchmark's) and its environment (`%s`), and parses the args with the binary's own flag set (`fleet.RunConfig`), so it runs what ships, leader election and the hub client's QPS/burst included. Overrides of this run: %s.\n\n",
		strings.Join(r.Config.DeployArgs, " "), or(strings.Join(r.Config.DeployEnv, " "), "none"), or(strings.Join(overrides, "; "), "none"))
	p("## Goals\n\n| figure | measured | goal | result |\n| --- | --- | --- | --- |\n")
	for _, g := range r.Goals {
		res := "PASS"
		switch {
		case g.Skipped:
			res = "NOT RUN"
		case g.Reported:
			res = "REPORTED"
		case !g.Pass:
			res = "MISS"
		}
		if g.Note != "" {
			res += " — " + g.Note
		}
		p("| %s | %s | %s | %s |\n", g.Figure, or(g.Measured, "—"), g.Goal, res)
	}
	c := r.Convergence
	p("\n## 1. Write cost\n\n")
	p("A pool change (a new value of one pool label) on all %d spokes at once; %d drifted objects (every Machine and Node of the pools). Patches counted in the spokes' audit logs (hub credential only): %d → **%.2f requests per drifted object**. Controller metrics agree: `hub_node_metadata_patches_total{result=\"Patched\"}` +%.0f, `hub_node_metadata_remote_requests_total{verb=\"patch\"}` +%.0f.\n\n",
		c.Spokes, c.Drifted, c.AuditPatches, c.PerObject, c.MetricPatched, c.RemotePatches)
	r.restMarkdown(p)
	p("\n## 2. Convergence\n\n")
	bl := r.Baseline
	p("Measured in the same run, with an admin client and no rate limit, while the controller was up and in sync (so these writes pay for the same watches as the controller's; they change a label no pool owns, so the controller writes nothing):\n\n")
	p("- patch round-trip, one at a time on the idle fleet (merge patch of a Node label): p50 %.1f ms (p90 %.1f, n=%d);\n", bl.PatchRTT.P50Ms, bl.PatchRTT.P90Ms, bl.PatchRTT.N)
	p("- watch hop (write → informer event): p50 %.1f ms (n=%d);\n", bl.WatchHop.P50Ms, bl.WatchHop.N)
	p("- patch round-trip under load: the %d writes of a pool change (Machine then Node per target) sent with %d in flight, as the controller sends them: mean %.1f ms, p50 %.1f, p99 %.1f ms; all done in %.0f ms (the direct-write floor); the controller meanwhile used %.2f s of CPU re-reading the clusters these writes touched.\n\n", bl.DirectWrites, bl.LoadedInFlight, bl.LoadedRTT.MeanMs, bl.LoadedRTT.P50Ms, bl.LoadedRTT.P99Ms, bl.DirectFloorMs, bl.ControllerCPUs)
	p("Ideal = RTT × writes / writes in flight + one watch hop = %.1f ms × %d / %d + %.1f ms = **%.0f ms**, with the round trip measured at the same number of writes in flight (%d = min(spokes, MaxConcurrentClusters) × WritesPerCluster).\n\n", bl.LoadedRTT.MeanMs, c.Writes, bl.LoadedInFlight, bl.WatchHop.P50Ms, c.IdealMs, bl.LoadedInFlight)
	p("Measured (pool update issued → the last Machine and Node seen holding it through the spokes' watches): **%.0f ms = %.2f× ideal**.\n\n", c.ConvergenceMs, c.Ratio)
	if pc := c.Propagation; pc != nil {
		p("The controller's own histogram of the same wave (`hub_node_metadata_pool_propagation_seconds{delivery=\"immediate\"}`, the SLO's series: from the moment it saw each new pool generation to the moment its writes held on every targeted object) counted %d of the %d changes; its p99, computed as `histogram_quantile` does from the buckets' increase, is %.0f ms in the bucket %s, and the bench's p99 per pool (update issued → last object seen holding it) is %.0f ms in %s: %d buckets apart.\n\n",
			pc.Observed, pc.Pools, pc.HistogramP99Ms, pc.HistogramBucket, pc.MeasuredP99Ms, pc.MeasuredBucket, pc.BucketsApart)
	}
	p("During the wave the controller process used %.2f s of CPU (%.2f ms per write), and its spoke requests waited %.1f s in all in the per-spoke rate limiters.\n\n", c.ControllerCPUs, 1000*safeDiv(c.ControllerCPUs, float64(c.Writes)), c.SpokeRateWaitS)
	p("With the idle round trip instead (%.1f ms × %d / %d + %.1f ms = %.0f ms) the ratio is %.0f×. That ideal assumes %d writes proceed in parallel as fast as one does alone; here %d API servers and etcd share %s, so a write's round trip grows with the writes in flight (%.1f ms idle, %.1f ms mean at %d in flight) and the fleet's write throughput, not the controller, sets the pace. Only more cores (or spokes on their own machines, as in production) move that ideal.\n",
		bl.PatchRTT.P50Ms, c.Writes, c.InFlight, bl.WatchHop.P50Ms, c.IdleIdealMs, c.IdleRatio, c.InFlight, r.Config.Spokes, r.Machine, bl.PatchRTT.P50Ms, bl.LoadedRTT.MeanMs, bl.LoadedInFlight)
	if qpsV, burst := math.Max(r.Config.SpokeQPS, 0), float64(r.Config.SpokeBurst); c.Spokes > 0 {
		if qpsV == 0 {
			qpsV = remote.DefaultQPS
		}
		perSpoke := float64(c.Writes) / float64(c.Spokes)
		p("\nThe controller's per-spoke client rate limit (QPS %g, burst %.0f) alone bounds one spoke's %.0f writes to ≥ (%.0f − %.0f) / %g = %.1f s, a term neither ideal includes.\n", qpsV, burst, perSpoke, perSpoke, burst, qpsV, math.Max(0, (perSpoke-burst)/qpsV))
	}
	rc := r.Reaction
	p("\n## 3. Reaction\n\n| case | n | p50 | p90 | p99 | max |\n| --- | --- | --- | --- | --- | --- |\n")
	p("| new Node linked to a pool's Machine | %d | %.0f ms | %.0f ms | %.0f ms | %.0f ms |\n", rc.NewNode.N, rc.NewNode.P50Ms, rc.NewNode.P90Ms, rc.NewNode.P99Ms, rc.NewNode.MaxMs)
	p("| out-of-band removal of a pool label | %d | %.0f ms | %.0f ms | %.0f ms | %.0f ms |\n\n", rc.Removal.N, rc.Removal.P50Ms, rc.Removal.P90Ms, rc.Removal.P99Ms, rc.Removal.MaxMs)
	p("Where a new Node's time goes (the samples above, not born in sync), each from the Node's creation as the same informers saw it; %d delivered by the link's copy of the Machine with no Node write of the controller, %d Machines fixed before their Node existed, %d not traced:\n\n| step | n | p50 | p90 | p99 | max |\n| --- | --- | --- | --- | --- | --- |\n", rc.NewNodeTrace.ByLink, rc.NewNodeTrace.MachineFirst, rc.NewNodeTrace.Missing)
	for _, x := range []struct {
		name string
		d    Dist
	}{{"the Node linked (`LinkNode`'s annotation and copy, as nodelink does)", rc.NewNodeTrace.Linked},
		{"the Machine's `status.nodeRef` set (`LinkNode`'s last write)", rc.NewNodeTrace.NodeRef},
		{"the Machine holds the pool (the controller's Machine write; 0 when before the Node)", rc.NewNodeTrace.MachineFixed},
		{"the controller's Node write, from the later of the two above", rc.NewNodeTrace.Controller}} {
		p("| %s | %d | %.0f ms | %.0f ms | %.0f ms | %.0f ms |\n", x.name, x.d.N, x.d.P50Ms, x.d.P90Ms, x.d.P99Ms, x.d.MaxMs)
	}
	p("\n")
	p("Spread over %d healthy spokes, %d at a time. Times run from the watch event that shows the new Node (or the removal) to the watch event that shows the pool's labels and taint on it, both seen by the same admin informer. New Nodes are made by `Spoke.ScaleUp` + `LinkNode` from a MachineSet template that lacks one pool label (changed on the hub only), so every new Node needs a write; %d were born holding everything (the controller had already fixed the Machine) and are left out. Unrepaired within the timeout: %d.\n", rc.SpokesUsed, rc.Concurrency, rc.BornInSync, rc.Unrepaired)
	if hb := rc.Heartbeats; hb.Posted > 0 {
		p("\nWhile the samples ran (%.0f s), the spokes' Nodes posted a real worker's status (a Node of %.1f KiB in protobuf) as a busy shard's kubelets do: every %s, and those of %d of the spokes every %s (a KubeletConfig that sets nodeStatusUpdateFrequency alone); each was given that status once before (%d a second, then %s of quiet), and every status was put back after%s. %d posts (%d failed), %.1f a second, each a watch event at the controller, whose writes race them (a conflict is retried). The controller used **%.1f%% of one core** over the samples, its reactions and the posts' events together, and held %.0f MiB RSS at the end. A lost watch event would leave its sample unrepaired for the 30 s timeout (the next resync is minutes away): %d were.\n",
			rc.WindowS, float64(hb.NodeBytes)/1024, r.Config.ReactionHeartbeat, rc.FastSpokes, r.Config.ReactionFastHeartbeat, putsPerSecond, heartbeatSettle, ifStr(!hb.Restored, " (**not all of them**: a put failed)"), hb.Posted, hb.Failed, hb.PerSecond, rc.ControllerCPUPercent, rc.RSSMiB, rc.Unrepaired)
	} else {
		p("\nNo Node posted its status while the samples ran (`-reaction-heartbeat %s`).\n", r.Config.ReactionHeartbeat)
	}
	m := r.Memory
	p("\n## 4. Hub memory\n\n")
	p("Measured in the controller process %s after every cluster is InSync (`-memory-settle`: the controller at rest, after what it does once a burst is over; freed heap is returned at its next --heap-release-interval once the burst has left the releaser's 30 s window), right after `runtime.GC()` (repeated until the goroutine stacks stop shrinking, at most 5 times, as they do over a running controller's periodic GCs): heap in use is `HeapInuse` (spans holding objects, so it counts their free slots too), live heap `HeapAlloc`, stacks `StackInuse`; freed heap not yet returned to the OS is `HeapIdle − HeapReleased` (in RSS until the runtime's scavenger returns it); RSS is its `/proc/<pid>/status` VmRSS, split into RssAnon (heap, stacks, the runtime's own memory) and RssFile (pages of files: the binary's code, paged in as it first runs, so the 0-spoke baseline, which never ran a spoke's TLS, HTTP/2 and decoding code, has less of it); the heap grew to `HeapSys` at its peak (a burst's: spans for that many bytes were in use at once, and the objects that stay are spread over them), and the runtime's own memory beside heap and stacks (`MSpanSys + MCacheSys + BuckHashSys + GCSys + OtherSys`: span records and GC metadata, sized by that peak and never given back). %s\n\n| connected | heap in use | live heap | stacks | freed, not returned | heap grew to | runtime's own | RSS | anonymous | file pages | goroutines |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n", r.Config.MemorySettle, r.memoryLimitNote())
	row := func(what string, x Memory) {
		p("| %s | %.1f MiB | %.1f MiB | %.2f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %d |\n", what, x.HeapInuseMiB, x.HeapAllocMiB, x.StackInuseMiB, x.UnreturnedMiB, x.HeapSysMiB, x.RuntimeMiB, x.RSSMiB, x.AnonMiB, x.FileMiB, x.Goroutines)
	}
	row("0 spokes (all ClusterDeployments paused)", m.Idle0)
	row(fmt.Sprintf("%d spokes × %.0f Nodes", m.K, m.NodesPerSpoke), m.At.Memory)
	if m.At.Restarted != nil {
		row(fmt.Sprintf("%d spokes × %.0f Nodes, restarted in sync", m.K, m.NodesPerSpoke), *m.At.Restarted)
	}
	ps := m.PerSpoke
	if len(m.At.Goroutines) > 0 {
		p("\nGoroutines at %d spokes × %.0f Nodes, by what they run (from the point's goroutine profile, `controller-%s-*-goroutine.pprof` beside the report): %s.\n", m.K, m.NodesPerSpoke, m.At.Dimension, shares(m.At.Goroutines, "%.0f", 5))
	}
	p("\nPer connected spoke at %.0f Nodes: **%.2f MiB RSS** (%.2f MiB anonymous, %.2f MiB file pages); %.2f MiB heap in use, of which %.2f MiB live; %.3f MiB stacks; %.2f MiB heap freed, not yet returned; %.3f MiB of the runtime's own; %.1f goroutines. The heap grew by %.2f MiB a spoke at its peak.\n\n", m.NodesPerSpoke, ps.RSSMiB, ps.AnonMiB, ps.FileMiB, ps.HeapMiB, ps.LiveMiB, ps.StackMiB, ps.Unreturned, ps.RuntimeMiB, ps.Goroutines, ps.HeapSysMiB)
	if r := m.At.PerSpokeRestarted; r != nil {
		p("That controller had just adopted the spokes: %d writes, each with its watch events, made while objects that stay (records, buffers grown to the writes' answers, hub objects) were being allocated among the writes' short-lived ones. Go's heap does not move objects, so a span that holds one of them and the writes' freed garbage stays in use: heap in use is %.1f× the live heap there. How many spans that is follows how far the burst grew the heap: to %.1f MiB (`HeapSys`), %.1f× what stays in use; the runtime's own span records and GC metadata, sized to that peak, stay too (%.1f MiB, %.1f MiB at 0 spokes). What holds spans in use, by allocation site, `hack/heapdump` tells from heap dumps of a run with `-controller-env GODEBUG=memprofilerate=1,BENCH_HEAPDUMP_DIR=<dir>` (not done here: profiling every allocation changes what is measured; docs/benchmark-notes.md has one such breakdown). Restarted on the same spokes once in sync (after the wave: it connects, lists and watches each kind, and writes nothing), a spoke costs **%.2f MiB RSS**: %.2f MiB heap in use, of which %.2f MiB live; %.3f MiB stacks; %.2f MiB heap freed, not yet returned; %.1f goroutines. The first figure is the goal's; the second is what a spoke costs a controller restarted on a fleet in sync. Either RSS counts the heap the runtime has freed and not yet returned to the OS, which moves by megabytes from one measurement to the next (the scavenger returns it in the background, and keeps up to about twice the live heap at the default GOGC), so heap in use and live heap are the steadier figures.\n\n",
			m.At.Wave.Drifted, ps.HeapMiB/ps.LiveMiB, m.At.Memory.HeapSysMiB, m.At.Memory.HeapSysMiB/m.At.Memory.HeapInuseMiB, m.At.Memory.RuntimeMiB, m.Idle0.RuntimeMiB, r.RSSMiB, r.HeapMiB, r.LiveMiB, r.StackMiB, r.Unreturned, r.Goroutines)
	}
	if m.MaxRealTarget > 0 {
		p("Real spokes: target %d, started %d, InSync %d; controller heap %.1f MiB, RSS %.1f MiB. %s\n\n", m.MaxRealTarget, m.MaxRealReached, m.MaxRealInSync, m.MaxRealMemory.HeapInuseMiB, m.MaxRealMemory.RSSMiB, m.MaxRealNote)
	} else {
		p("Real spokes: not run (`-max-real-spokes 0`).\n\n")
	}
	s := r.Sim
	if s.Skipped != "" {
		p("Fleet scale: not run (%s).\n", s.Skipped)
	} else {
		p("Fleet scale, **simulated**: %d ClusterDeployments, each with its own namespace, kubeconfig Secret and ClusterDeployment on the hub and its own pool (%d Machine(s) and Node(s), with a pool label the MachineSet template lacks, so each needs real writes), spread over %d real spokes that they share (the earlier steps' Machines, MachineSets and Nodes are deleted from them first). Every simulated cluster is its own connection and cache in the controller, and each cache holds all of its shared spoke's objects (%d Nodes, %d Machines, %d MachineSets), so the per-cluster cache is overstated: an upper bound.\n\n",
			s.Clusters, s.NodesPerCluster, s.RealSpokes, s.CacheNodes, s.CacheMachines, s.CacheMachineSets)
		p("| figure | value |\n| --- | --- |\n| set-up on hub and spokes | %.0f s |\n| clusters InSync | %d of %d, %s %.0f s |\n| Nodes holding their pool label | %d |\n| controller heap in use / live heap / stacks / freed, not returned / RSS, at the end of the in-sync window | %.0f / %.0f / %.0f / %.0f / %.0f MiB (%d goroutines) |\n| per cluster (minus the 0-spoke baseline) | %.3f MiB heap, %.3f MiB RSS |\n| RSS at 2,000 clusters | %.0f MiB%s |\n| hub requests by the controller | %.0f |\n| spoke requests' wait in the per-spoke rate limiters | %.1f s in all |\n| controller CPU over %.0f s in sync (GC included) | %.1f%% of one core (%.0f reconciles: the resyncs) |\n| freed heap returned to the OS (`heap_releases_total`, --heap-release-interval) | %.0f times |\n\n",
			s.SetupS, s.InSync, s.Clusters, map[bool]string{true: "all after", false: "when the wait stopped after"}[s.InSync >= s.Clusters], s.AllInSyncS, s.NodesLabelled, s.Memory.HeapInuseMiB, s.Memory.HeapAllocMiB, s.Memory.StackInuseMiB, s.Memory.UnreturnedMiB, s.Memory.RSSMiB, s.Memory.Goroutines, s.HeapPerCD, s.RSSPerCD, s.RSSAt2000MiB, map[bool]string{true: " (extrapolated)", false: ""}[s.Extrapolated], s.HubRequests, s.SpokeRateWaitS, s.SteadyS, s.SteadyCPUPercent, s.SteadyReconciles, s.HeapReleases)
		if hb := s.Heartbeats; hb.Posted > 0 {
			shard := 0.0
			if d, err := time.ParseDuration(r.Config.SimHeartbeat); err == nil && d > 0 {
				shard = shardClusters * 100 / d.Seconds()
			}
			p("In that window every Node of the shared spokes posted its status every %s, as a kubelet does at least (nodeStatusReportFrequency; a busy worker's posts whenever anything but the heartbeat time changed, volumes, images or conditions, about once a minute, which §3 and §7 run): a real worker's status (50 images, addresses, capacity, system info, four conditions), so that each post is a watch event of a Node of %.1f KiB in protobuf at every cache that holds the Node (each holds all of its spoke's). Before the window opened, each Node was given that status once (%d a second, then %s of quiet): the simulated Nodes start with a bare status, which a first post changes, and a kubelet's posts on a fleet in sync change nothing. %d posts (%d failed), **%.0f watch events a second** at the controller (%d in all); a shard of 2,000 clusters of 100 Nodes would see %.0f a second. The window's CPU over its events is **%.0f µs an event**, an upper bound (the resyncs are in it too; §7's capacity step prices an event alone). The posts stopped with the window; the memory figures below were then taken, and every Node's status was put back as it was before the restarts (%d a second)%s.\n\n",
				r.Config.SimHeartbeat, float64(hb.NodeBytes)/1024, putsPerSecond, heartbeatSettle, hb.Posted, hb.Failed, float64(hb.Events)/s.SteadyS, hb.Events, shard, 1e6*safeDiv(s.SteadyCPUPercent/100*s.SteadyS, float64(hb.Events)), putsPerSecond, ifStr(!hb.Restored, " (**not all of them**: a put failed)"))
		} else if s.SteadyS > 0 {
			p("No Node posted its status in that window (`-sim-heartbeat %s`).\n\n", r.Config.SimHeartbeat)
		}
		if len(s.SteadyCPU) > 0 {
			total := 0.0
			for _, c := range s.SteadyCPU {
				total += c.Value
			}
			p("Where the in-sync CPU goes (a CPU profile of the same %.0f s, `controller-steady-cpu.pprof` beside the report, whose samples add up to %.1f%%; %% of one core, by the work each sample's goroutine does): %s.\n\n", s.SteadyS, total, shares(s.SteadyCPU, "%.2f%%", 0.05))
		}
		if len(s.Heap) > 0 {
			p("Where the live heap goes at %d clusters (`controller-sim-heap.pprof`, Go's sampled heap profile, by what holds each allocation): %s.\n\n", s.Clusters, shares(s.Heap, "%.0f MiB", 4))
		}
	}
	if sl := r.SimLarge; sl.Skipped == "" {
		p("Larger caches: after the restarts, the same %d simulated clusters are moved onto %d of those real spokes (their kubeconfig Secrets re-pointed, their Machines, MachineSets and Nodes made again there, unlabelled), so that each cache holds %d Nodes (with their Machines and MachineSets), and a controller is started as config/hub runs it (set-up %.0f s). %d of %d clusters InSync after %.0f s; the controller's RSS, sampled once a second meanwhile, peaked at **%.0f MiB**; at the end %.0f MiB RSS, %.0f MiB heap in use, %.0f MiB live, %.0f MiB stacks (%d goroutines); %d Nodes hold their pool's label.\n\n",
			sl.Clusters, sl.RealSpokes, sl.CacheNodes, sl.SetupS, sl.InSync, sl.Clusters, sl.AllInSyncS, sl.PeakRSSMiB, sl.Memory.RSSMiB, sl.Memory.HeapInuseMiB, sl.Memory.HeapAllocMiB, sl.Memory.StackInuseMiB, sl.Memory.Goroutines, sl.NodesLabelled)
		if u := sl.Unlimited; u != nil && u.Skipped == "" {
			pc := u.PerCluster
			p("The same clusters adopted again, by a controller started **without GOMEMLIMIT** (the figures above ran with it, and the heap then sat near the soft limit), after their Machines and Nodes were made again unlabelled (%.0f s): %d of %d InSync after %.0f s, %d Nodes labelled, RSS peak %.0f MiB; measured %s after, at rest: %.0f MiB RSS, %.0f MiB heap in use, %.0f MiB live, %.0f MiB stacks, %.0f MiB freed and not returned (%d goroutines). Per cluster, less the 0-spoke baseline: **%.3f MiB RSS** (%.3f anonymous), %.3f MiB heap in use (%.3f live), %.3f MiB stacks, %.1f goroutines. With the soft limit, the first run's end: %.3f MiB RSS a cluster, %.3f heap in use (%.3f live).\n\n",
				sl.UnlimitedSetupS, u.InSync, sl.Clusters, u.AllInSyncS, sl.UnlimitedNodesLabelled, u.PeakRSSMiB, r.Config.MemorySettle, u.Memory.RSSMiB, u.Memory.HeapInuseMiB, u.Memory.HeapAllocMiB, u.Memory.StackInuseMiB, u.Memory.UnreturnedMiB, u.Memory.Goroutines,
				pc.RSSMiB, pc.AnonMiB, pc.HeapMiB, pc.LiveMiB, pc.StackMiB, pc.Goroutines, sl.PerCluster.RSSMiB, sl.PerCluster.HeapMiB, sl.PerCluster.LiveMiB)
		} else if u != nil {
			p("A controller started without GOMEMLIMIT on the same clusters: %s.\n\n", u.Skipped)
		}
		for _, x := range []struct {
			how string
			run *RestartedRun
		}{{"with the shipped soft limit, after the first adoption", sl.Restarted}, {"without GOMEMLIMIT, after the second", sl.UnlimitedRestarted}} {
			if x.run == nil {
				continue
			}
			if x.run.Skipped != "" {
				p("A restart on the clusters in sync, %s: %s.\n\n", x.how, x.run.Skipped)
				continue
			}
			p("A restart on the clusters in sync, %s: %d of %d InSync after %.0f s, RSS peak **%.0f MiB**; %s after, %.0f MiB RSS, %.0f MiB heap in use, %.0f MiB live (%.3f MiB RSS a cluster).\n\n",
				x.how, x.run.InSync, sl.Clusters, x.run.AllInSyncS, x.run.PeakRSSMiB, r.Config.MemorySettle, x.run.Memory.RSSMiB, x.run.Memory.HeapInuseMiB, x.run.Memory.HeapAllocMiB, x.run.PerCluster.RSSMiB)
		}
	}
	p("What each hand-written piece of the spoke cache (pkg/remote) saves against the library it replaces, measured by switching it off, and whether it stays: [benchmark-notes.md, the hand-written pieces](benchmark-notes.md#the-hand-written-pieces-what-each-saves-and-whether-it-stays).\n\n")
	iso := r.Isolation
	p("\n## 5. Isolation\n\n")
	if iso.Skipped != "" {
		p("Not run: %s.\n", iso.Skipped)
	} else {
		p("Degraded (behind `localfleet.Proxy` from the start): %s. Convergence of the %d other spokes after a pool change on all spokes:\n\n| run | healthy spokes converged | ratio |\n| --- | --- | --- |\n", strings.Join(iso.Degraded, ", "), iso.Healthy)
		p("| all healthy (mean of %v ms) | %.0f ms | 1.00× |\n| %d black-holed | %.0f ms | %.2f× |\n| %d answering after %s | %.0f ms | %.2f× |\n\n", iso.BaselinesMs, iso.BaselineMs, len(iso.Degraded), iso.BlackHoleMs, iso.BlackHoleX, len(iso.Degraded), r.Config.Delay, iso.DelayMs, iso.DelayX)
		p("After healing, the degraded spokes converged in %.1f s.\n", iso.HealedAfterS)
	}
	p("\n## 6. Cost growth\n\n| dimension | spokes × Nodes | drifted | convergence | ideal | ratio | requests/object | heap | RSS | heap/spoke | live/spoke | stacks/spoke | RSS/spoke | anonymous RSS/spoke | goroutines/spoke |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, g := range r.Growth {
		w := g.Wave
		ps := g.PerSpoke
		p("| %s | %d × %.0f | %d | %.0f ms | %.0f ms | %.2f× | %.2f | %.1f MiB | %.1f MiB | %.2f MiB | %.2f MiB | %.3f MiB | %.2f MiB | %.2f MiB | %.1f |\n", g.Dimension, w.Spokes, w.NodesPerSpoke, w.Drifted, w.ConvergenceMs, w.IdealMs, w.Ratio, w.PerObject, g.Memory.HeapInuseMiB, g.Memory.RSSMiB, ps.HeapMiB, ps.LiveMiB, ps.StackMiB, ps.RSSMiB, ps.AnonMiB, ps.Goroutines)
	}
	p("\nPer-spoke figures are (figure − the 0-spoke baseline) / spokes. %s\n", r.memoryLimitNote())
	if c, n := m.PerConnection, m.PerNode; c.RSSMiB != 0 || n.RSSMiB != 0 {
		p("\nA least-squares line through the Nodes points splits a spoke's cost: **per connection** %.3f MiB RSS (%.3f anonymous), %.3f MiB heap in use (%.3f live), %.3f MiB stacks, %.1f goroutines; **per Node** (with its Machine and MachineSet share) %.1f KiB RSS (%.1f anonymous), %.1f KiB heap in use (%.1f live), %.2f KiB stacks.\n",
			c.RSSMiB, c.AnonMiB, c.HeapMiB, c.LiveMiB, c.StackMiB, c.Goroutines, 1024*n.RSSMiB, 1024*n.AnonMiB, 1024*n.HeapMiB, 1024*n.LiveMiB, 1024*n.StackMiB)
	}
	r.capacityMarkdown(p)
	p("\n## How to run\n\n`make bench` builds `hack/bench` into `_out/bench/bench` and runs it with the control plane from `hack/controlplane.sh`; it writes `_out/bench/report.md` and `_out/bench/report.json` and copies the Markdown here. Sizes are flags, passed with `BENCH_FLAGS`, e.g. `make bench BENCH_FLAGS='-idle 1m -sim-steady 2m -max-real-spokes 0'` for a shorter run (the at-rest goals and the in-sync CPU's then show why they are not met: they need windows that span the resyncs); `_out/bench/bench -h` lists them (`-spokes`, `-nodes`, `-idle`, `-idle-resync`, `-reaction-samples`, `-growth-spokes`, `-growth-nodes`, `-sim-clusters`, `-sim-real-spokes`, `-sim-large-real-spokes`, `-max-real-spokes`, `-capacity-clusters`, `-capacity-rates`, `-hub-qps`, `-spoke-qps`, ...); `-only capacity` runs the fleet's set-up and the capacity step alone, and leaves this file as it is. `go test ./int -run TestBenchPipeline` runs the same pipeline at tiny sizes. Controller logs of each step are in `_out/bench/controller-*.log`.\n")
	if len(r.Notes) > 0 {
		p("\n## Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
	}
	return b.String()
}

// peaksRow reports the peaks a Deployment's memory limit is sized by, at a shard's scale: an
// adoption and a restart, each with the shipped soft limit and without.
func (r *Report) peaksRow() Goal {
	sl := r.SimLarge
	peak := func(run *RestartedRun) string {
		switch {
		case run == nil:
			return "not run"
		case run.Skipped != "":
			return fmt.Sprintf("%.0f MiB (%s)", run.PeakRSSMiB, run.Skipped)
		}
		return fmt.Sprintf("%.0f MiB", run.PeakRSSMiB)
	}
	adoptWith := fmt.Sprintf("%.0f MiB", sl.PeakRSSMiB)
	if sl.InSync < sl.Clusters {
		adoptWith += fmt.Sprintf(" (%d of %d InSync)", sl.InSync, sl.Clusters)
	}
	return Goal{Figure: fmt.Sprintf("Peak RSS at a shard's scale (%d simulated clusters, %d Nodes in each cache)", sl.Clusters, sl.CacheNodes),
		Goal:     fmt.Sprintf("reported: what the Deployment's memory limit (%.0f MiB) is sized by", r.deploymentLimitMiB()),
		Reported: true,
		Measured: fmt.Sprintf("adoption %s with the soft limit, %s without; restart in sync %s with, %s without", adoptWith, peak(sl.Unlimited), peak(sl.Restarted), peak(sl.UnlimitedRestarted)),
		Note:     "RSS sampled once a second until every cluster was InSync; " + r.gomemlimitNote()}
}

// reactionHeartbeatsNote says what the spokes' Nodes posted while the reaction samples ran.
func (r *Report) reactionHeartbeatsNote() string {
	rc, c := r.Reaction, r.Config
	if rc.Heartbeats.Posted == 0 {
		return "no Node posted its status meanwhile (-reaction-heartbeat 0, or every post failed)"
	}
	return fmt.Sprintf("meanwhile every Node posted a real worker's status every %s (those of %d of the spokes every %s): %.1f posts a second, %d failed",
		c.ReactionHeartbeat, rc.FastSpokes, c.ReactionFastHeartbeat, rc.Heartbeats.PerSecond, rc.Heartbeats.Failed)
}

// fmtMs is a goal's time: in seconds from a second up.
func fmtMs(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%g s", ms/1000)
	}
	return fmt.Sprintf("%g ms", ms)
}

// deploymentLimitMiB is the memory limit of config/hub's manager container.
func (r *Report) deploymentLimitMiB() float64 {
	return float64(r.Config.DeploymentMemoryLimit) / (1 << 20)
}

// shippedGOMEMLIMIT is the soft limit hub-controller sets in config/hub's Deployment.
func (r *Report) shippedGOMEMLIMIT() string {
	return strconv.FormatInt(int64(float64(r.Config.DeploymentMemoryLimit)*r.Config.MemoryLimitRatio), 10)
}

// gomemlimitNote is the soft limit as a goal's row prints it beside the figure: an override
// says so, and what ships.
func (r *Report) gomemlimitNote() string {
	c := r.Config
	switch c.GOMEMLIMIT {
	case r.shippedGOMEMLIMIT():
		return fmt.Sprintf("run as config/hub runs it, GOMEMLIMIT %s bytes (%.0f%% of the Deployment's memory limit, as hub-controller sets it from its cgroup)", c.GOMEMLIMIT, 100*c.MemoryLimitRatio)
	case "", "off":
		return fmt.Sprintf("override: GOMEMLIMIT unset (config/hub runs with %s bytes)", r.shippedGOMEMLIMIT())
	default:
		return fmt.Sprintf("override: GOMEMLIMIT %s bytes (config/hub runs with %s bytes)", c.GOMEMLIMIT, r.shippedGOMEMLIMIT())
	}
}

// gomemlimitText says what soft memory limit the controller processes ran with.
func (r *Report) gomemlimitText() string {
	c := r.Config
	switch c.GOMEMLIMIT {
	case "", "off":
		return "GOMEMLIMIT unset"
	case r.shippedGOMEMLIMIT():
		return fmt.Sprintf("GOMEMLIMIT %s bytes: %.0f%% of the memory limit of config/hub's Deployment (%.0f MiB), as hub-controller sets it from its container's cgroup",
			c.GOMEMLIMIT, 100*c.MemoryLimitRatio, r.deploymentLimitMiB())
	default:
		return fmt.Sprintf("GOMEMLIMIT %s bytes (overridden)", c.GOMEMLIMIT)
	}
}

// memoryLimitNote says whether the memory points ran under a soft memory limit, and whether
// it could have bound: a limit far above the heap leaves the GC pacing by GOGC alone, as
// without one.
func (r *Report) memoryLimitNote() string {
	if r.Config.GOMEMLIMIT == "" || r.Config.GOMEMLIMIT == "off" {
		return "The controller ran without GOMEMLIMIT."
	}
	limit, err := strconv.ParseFloat(r.Config.GOMEMLIMIT, 64)
	if err != nil {
		return fmt.Sprintf("The controller ran with GOMEMLIMIT %s.", r.Config.GOMEMLIMIT)
	}
	largest := r.Memory.Idle0.HeapInuseMiB
	for _, g := range r.Growth {
		largest = max(largest, g.Memory.HeapInuseMiB)
	}
	which := "the shipped soft limit"
	if r.Config.GOMEMLIMIT != r.shippedGOMEMLIMIT() {
		which = "an overridden soft limit"
	}
	note := fmt.Sprintf("The controller ran with %s, GOMEMLIMIT %s bytes (%.0f MiB)", which, r.Config.GOMEMLIMIT, limit/(1<<20))
	if largest > 0 && 2*largest < limit/(1<<20) {
		return note + fmt.Sprintf(", over %.0f× the largest heap here (%.0f MiB): the GC paced by GOGC alone, as without a limit.", limit/(1<<20)/largest, largest)
	}
	return note + "."
}

func qps(v, def float64) string {
	switch {
	case v < 0:
		return "unlimited"
	case v == 0 && def == 0:
		return "client-go default"
	case v == 0:
		return fmt.Sprintf("%.0f", def)
	}
	return fmt.Sprintf("%g", v)
}

func or(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func verbs[V int | float64](m map[string]V) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch v := any(m[k]).(type) {
		case float64:
			parts = append(parts, fmt.Sprintf("%s %.1f", k, v))
		default:
			parts = append(parts, fmt.Sprintf("%s %v", k, v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func ifStr(c bool, s string) string {
	if c {
		return s
	}
	return ""
}

func durSeconds(s string) float64 {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 1
	}
	return d.Seconds()
}
