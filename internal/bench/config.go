// Package bench is the benchmark behind `make bench`: it starts a local hub
// and real spoke API servers (internal/localfleet), runs the controller as a
// separate process (ControllerMain, the same fleet.NewManager setup as
// cmd/hub-controller), and measures write cost, convergence against an
// ideal computed in the same run, reaction times, hub memory, isolation from
// broken spokes and how these grow with the fleet. Run returns a Report;
// hack/bench writes it as Markdown and JSON.
package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/openshift/hub-node-metadata/pkg/fleet"
	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// Config sizes a benchmark run. Zero values take the defaults of
// DefaultConfig where noted.
type Config struct {
	// Spokes × Nodes is the main fleet: one pool per spoke with Nodes
	// replicas.
	Spokes, Nodes int
	// Idle is the window of an in-sync fleet over which requests are counted.
	Idle time.Duration
	// IdleResync is the --resync-period of the at-rest step's controller
	// (an override, printed), so that the window spans several resyncs; 0
	// keeps the shipped period.
	IdleResync time.Duration
	// ReactionSamples per kind (new Node, out-of-band removal), spread over
	// the healthy spokes, ReactionConcurrency at a time.
	ReactionSamples, ReactionConcurrency int
	// ReactionHeartbeat is how often each Node of the reaction step's spokes posts a real
	// worker's status while the samples run (a busy shard's kubelet: about once a minute), and
	// the Nodes of the first ReactionFastSpokes of them every ReactionFastHeartbeat instead (a
	// KubeletConfig that sets nodeStatusUpdateFrequency without nodeStatusReportFrequency: 10 s).
	// 0: no posts.
	ReactionHeartbeat, ReactionFastHeartbeat time.Duration
	ReactionFastSpokes                       int
	// DegradedFraction of the spokes are black-holed, then delayed by
	// Delay, while the others' convergence is measured (at least 1 spoke
	// when > 0 and there are 2 or more spokes).
	DegradedFraction float64
	Delay            time.Duration
	// GrowthSpokes are subsets of the main fleet (first N spokes) measured
	// again; the main fleet is the last point.
	GrowthSpokes []int
	// GrowthNodes are the Nodes per spoke of a second set of
	// GrowthNodesSpokes spokes, grown in place from the first value.
	GrowthNodes       []int
	GrowthNodesSpokes int
	// SimClusters simulated ClusterDeployments over SimRealSpokes real spokes
	// (0: every healthy one, after the earlier steps' objects are deleted from
	// them), SimNodes Machines and Nodes each (0 skips the step).
	SimClusters, SimRealSpokes, SimNodes int
	// SimTimeout bounds the wait for every simulated cluster to be InSync in an adoption
	// (the first start, the larger caches' adoptions); a wait in which none gets there for
	// StallAfter ends sooner (waitStateAt). Its time is reported, not judged: the API servers
	// of the local fleet share the machine's cores with the controller, so it is the
	// machine's figure as much as the controller's.
	SimTimeout time.Duration
	// StartProfile is how long the first start and the restart run under the CPU profiler
	// (the controller's and a spoke's); the step waits for it.
	StartProfile time.Duration
	// SimLargeRealSpokes, after the simulation's restarts, moves the simulated clusters onto
	// this many of its real spokes, so that each cache holds the Nodes and Machines of
	// SimClusters/SimLargeRealSpokes clusters, and checks that every cluster syncs under the Deployment's memory
	// limit (0 skips it).
	SimLargeRealSpokes int
	// RestartTimeout bounds the wait for every simulated cluster to be
	// InSync after a restart and after a failover (their goal is a minute);
	// a case that times out is reported as it stood.
	RestartTimeout time.Duration
	// SimSteady is the window over which the controller's CPU is measured
	// once every simulated cluster is in sync (0 skips it). A fleet in sync
	// still resyncs: every cluster once per --resync-period (10 min, jittered
	// ±10%, from its last sync), so the window outlasts the longest period
	// (12 min against 11), and holds each cluster's first resync: the 2,000
	// clusters reach InSync over about two minutes, each resyncs 9 to 11
	// minutes after its own sync, inside a window that opens once all are
	// InSync. The goal's row fails a window shorter than 11 minutes.
	// It also holds several of the GCs Go forces every 2 minutes at rest
	// (about a second of CPU each at 2,000 clusters), which a window of 2
	// minutes held or not, reading about 3% or 7%.
	SimSteady time.Duration
	// SimHeartbeat is how often each Node of the simulation's spokes posts its status during
	// the in-sync window, as a kubelet does at least (nodeStatusReportFrequency, 5 minutes). A
	// busy shard's Nodes post about once a minute, which the reaction and capacity steps run:
	// here every post reaches each cache that shares its spoke (42 at the default size), so at
	// once a minute the spokes' API servers would send about 1,400 real-sized events a second,
	// more than the machine that also runs the controller can serve. A real worker's status each
	// time: every post is a watch event, the size of a
	// real worker's Node, at each cache that holds the Node (0: no heartbeats). Each Node is
	// given that status once before the window, so that the window holds heartbeats alone.
	SimHeartbeat time.Duration
	// MemorySettle is how long the controller runs on once every cluster is InSync before its
	// memory is measured: the state a controller at rest spends its life in, after what it
	// does once a burst is over: freed heap is returned once the burst has left the heap
	// releaser's 30 s window, at its next --heap-release-interval (10 s). The burst ends
	// after InSync (records are packed 5 s after a spoke's last event, statuses are written),
	// so the return comes 30 to 50 s after InSync; 45 s came before it on a slow run (make
	// bench of 2026-11-26 11:13 UTC: 5.5 MiB freed and not returned at 10 spokes, 0.5 to 1.2
	// in other runs), hence 75 s.
	MemorySettle time.Duration
	// SimRSSCapMiB stops the simulation when the controller's RSS passes
	// it (protects a shared machine); 0 disables.
	SimRSSCapMiB float64
	// MaxRealSpokes, when > 0, grows the fleet to that many real spokes
	// (new ones with MaxRealNodes Nodes) and checks all are InSync.
	MaxRealSpokes, MaxRealNodes int
	// HubQPS/HubBurst of the controller's hub client and SpokeQPS/SpokeBurst
	// per spoke; the defaults are hub-controller's, and a value that differs
	// is passed as a flag and printed as an override.
	HubQPS     float64
	HubBurst   int
	SpokeQPS   float64
	SpokeBurst int
	// ControllerEnv are extra KEY=VALUE environment variables of every
	// controller process (e.g. client-go's HTTP2_READ_IDLE_TIMEOUT_SECONDS),
	// printed as overrides.
	ControllerEnv []string
	// ControllerFlags are extra flags of every controller process (e.g.
	// --spoke-max-concurrent-connects=128), printed as overrides.
	ControllerFlags []string
	// GOMEMLIMIT of the controller process: "" takes what hub-controller sets in
	// config/hub's Deployment (fleet.MemoryLimitRatio of its memory limit), "off"
	// runs without a soft memory limit.
	GOMEMLIMIT string
	// CapacityClusters connections to the capacity step's event server, each a cluster of
	// CapacityNodes real-sized Nodes whose status posts it replays at each of CapacityRates
	// (events a second, all connections), read over CapacityWindow (0 clusters skip the step).
	CapacityClusters, CapacityNodes int
	CapacityRates                   []int
	CapacityWindow                  time.Duration
	// Only runs the fleet's set-up and this step alone ("capacity"); empty runs them all.
	Only string
	// ConvergeTimeout bounds every wait for convergence.
	ConvergeTimeout time.Duration
	// ControllerCommand runs ControllerMain (e.g. [bench-binary, "controller"]).
	ControllerCommand []string
	// OutDir receives controller logs (the report is written by the caller).
	OutDir string
	// RepoRoot is the module root (for config/hub); found from the working
	// directory when empty.
	RepoRoot string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// FleetLog receives the API servers' output; nil discards it.
	FleetLog io.Writer
	// ControlPlaneGOGC is the GOGC of etcd and the API servers
	// (localfleet.Options.ControlPlaneGOGC): empty, they run as they ship. Set, the report notes it, since the spokes
	// share the machine with the controller it measures.
	ControlPlaneGOGC string
	// ControlPlaneGOMAXPROCS is their GOMAXPROCS (localfleet.Options.ControlPlaneGOMAXPROCS):
	// 0, as they ship. Set, the report notes it.
	ControlPlaneGOMAXPROCS int
}

// DefaultConfig is what `make bench` runs.
func DefaultConfig() Config {
	return Config{
		Spokes: 20, Nodes: 50,
		Idle:            10 * time.Minute,
		ReactionSamples: 50, ReactionConcurrency: 4,
		ReactionHeartbeat: time.Minute, ReactionFastHeartbeat: 10 * time.Second, ReactionFastSpokes: 2,
		DegradedFraction: 0.1, Delay: 2 * time.Second,
		GrowthSpokes: []int{5, 10},
		GrowthNodes:  []int{10, 50, 100, 250}, GrowthNodesSpokes: 10,
		SimClusters: 2000, SimRealSpokes: 0, SimNodes: 1, SimTimeout: 15 * time.Minute, StartProfile: 30 * time.Second, RestartTimeout: 3 * time.Minute, SimSteady: 12 * time.Minute, SimHeartbeat: 5 * time.Minute, SimRSSCapMiB: 6144,
		SimLargeRealSpokes: 20,
		MaxRealSpokes:      50, MaxRealNodes: 3,
		HubQPS: fleet.DefaultHubQPS, HubBurst: fleet.DefaultHubBurst, SpokeQPS: remote.DefaultQPS, SpokeBurst: remote.DefaultBurst,
		IdleResync:       3 * time.Minute,
		ConvergeTimeout:  5 * time.Minute,
		MemorySettle:     75 * time.Second,
		CapacityClusters: 2000, CapacityNodes: 100, CapacityRates: []int{2500, 5000, 10000, 20000, 40000}, CapacityWindow: 20 * time.Second,
	}
}

func (c Config) validate() error {
	if c.Spokes < 1 || c.Nodes < 1 {
		return errors.New("need at least 1 spoke and 1 Node")
	}
	if len(c.ControllerCommand) == 0 {
		return errors.New("ControllerCommand is empty")
	}
	if c.Only != "" && c.Only != "capacity" {
		return fmt.Errorf("-only %q: the one step that runs alone is capacity", c.Only)
	}
	if c.OutDir == "" {
		return errors.New("OutDir is empty")
	}
	return nil
}

// findRoot walks up from the working directory to go.mod.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
