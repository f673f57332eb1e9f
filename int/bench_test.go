package int_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openshift/hub-node-metadata/internal/bench"
)

// TestBenchPipeline runs the whole `make bench` pipeline at tiny sizes and
// checks that the report has every section with numbers. It does not check
// that goals are met: that is the benchmark's job, at its real sizes.
func TestBenchPipeline(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 10*time.Minute)
	bin := filepath.Join(t.TempDir(), "bench")
	if out, err := goBuild(bin, "../hack/bench"); err != nil {
		t.Fatalf("go build ./hack/bench: %v\n%s", err, out)
	}
	cfg := bench.DefaultConfig()
	// 3 main spokes: one degraded (proxied, black-holed in the dead-spoke
	// step), 2 healthy (one killed, one frozen there).
	cfg.Spokes, cfg.Nodes = 3, 3
	cfg.Idle, cfg.IdleResync = 6*time.Second, 2*time.Second
	cfg.ReactionSamples, cfg.ReactionConcurrency = 10, 2
	// Meanwhile the 2 healthy spokes' Nodes post: one spoke's every second, the other's every 2 s.
	cfg.ReactionFastSpokes, cfg.ReactionFastHeartbeat, cfg.ReactionHeartbeat = 1, time.Second, 2*time.Second
	cfg.GrowthSpokes = []int{1}
	cfg.GrowthNodes, cfg.GrowthNodesSpokes = []int{2, 4}, 1
	// 3 main spokes (one degraded) + 1 of the Nodes dimension; the ceiling step adds one.
	// The simulation clears and shares the 4 healthy ones.
	cfg.MaxRealSpokes, cfg.MaxRealNodes = 5, 2
	cfg.SimClusters, cfg.SimRealSpokes, cfg.SimTimeout, cfg.SimSteady = 20, 0, 3*time.Minute, 3*time.Second
	cfg.SimHeartbeat = time.Second // each of the 20 Nodes posts about 3 times in the window
	cfg.SimLargeRealSpokes = 2
	// 5 connections to the event server, a cluster of 3 Nodes each, two rates.
	cfg.CapacityClusters, cfg.CapacityNodes, cfg.CapacityRates, cfg.CapacityWindow = 5, 3, []int{50, 100}, 2*time.Second
	// A faster HTTP/2 health check than client-go's 30 s + 15 s, so that the
	// dead-spoke step takes seconds (the report prints it as an override).
	cfg.ControllerEnv = []string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS=5", "HTTP2_PING_TIMEOUT_SECONDS=5"}
	cfg.ConvergeTimeout = 2 * time.Minute
	cfg.MemorySettle = 3 * time.Second
	cfg.StartProfile = 3 * time.Second
	cfg.ControllerCommand = []string{bin, "controller"}
	cfg.OutDir = t.TempDir()
	cfg.ControlPlaneGOGC, cfg.ControlPlaneGOMAXPROCS = controlPlaneGOGC, controlPlaneGOMAXPROCS
	if os.Getenv("TEST_VERBOSE_LOG") != "" {
		cfg.Log = os.Stderr
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	rep.Command = "go test ./int -run TestBenchPipeline"

	if rep.Notes != nil {
		t.Logf("notes: %v", rep.Notes)
	}
	c := rep.Convergence
	if c.Drifted != 3*2*3 || c.AuditPatches == 0 || c.PerObject <= 0 || c.ConvergenceMs <= 0 || c.IdealMs <= 0 {
		t.Errorf("convergence/write cost: %+v", c)
	}
	if c.IdleIdealMs <= 0 || c.Ratio <= 0 || c.IdleRatio <= 0 {
		t.Errorf("ideals: %+v", c)
	}
	// The controller's propagation histogram counted every change of the
	// wave, and its p99 is within a bucket of the bench's own.
	if pc := c.Propagation; pc == nil || pc.Pools != 3 || pc.Observed != pc.Pools || pc.BucketsApart > 1 || pc.HistogramP99Ms <= 0 ||
		pc.ObjectiveS != 10 || pc.WithinObjective > pc.Observed || !slices.ContainsFunc(rep.Goals, func(g bench.Goal) bool {
		return strings.HasPrefix(g.Figure, "Pool changes within the propagation SLO's objective")
	}) {
		t.Errorf("propagation histogram vs the bench: %+v", pc)
	} else {
		t.Logf("propagation p99: histogram %.0f ms %s, bench %.0f ms %s", pc.HistogramP99Ms, pc.HistogramBucket, pc.MeasuredP99Ms, pc.MeasuredBucket)
	}
	if bl := rep.Baseline; bl.PatchRTT.N == 0 || bl.WatchHop.N == 0 || bl.DirectFloorMs <= 0 || bl.LoadedRTT.N != bl.DirectWrites || bl.LoadedRTT.MeanMs <= 0 || bl.LoadedInFlight <= 0 {
		t.Errorf("baseline: %+v", rep.Baseline)
	}
	// At rest (a process of its own, resyncs every 2 s): nothing but watches,
	// on the spokes and on the hub (the Lease aside); the resyncs did run.
	if id := rep.Idle; id.Skipped != "" || id.WindowS != 6 || id.Writes != 0 || id.Reads != id.Audit.ByVerb["watch"] ||
		id.Hub.ByVerb == nil || id.Hub.Writes != 0 || id.Hub.Reads != 0 || id.Hub.Lease == 0 || id.Reconciles < float64(id.Clusters) {
		t.Errorf("idle: %+v", rep.Idle)
	}
	rs := rep.Restart
	if rs.Skipped != "" || rs.Clusters != 20 {
		t.Errorf("restart: %+v", rs)
	}
	// The restart's CPU profiles, the controller's and a spoke API server's, are written, and
	// the capacity step's restart's.
	for _, name := range []string{"controller-first-start-cpu.pprof", "spoke-first-start-cpu.pprof", "controller-restart-cpu.pprof", "spoke-restart-cpu.pprof", "controller-capacity-restart-cpu.pprof"} {
		if fi, err := os.Stat(filepath.Join(cfg.OutDir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, c := range map[string]bench.RestartCase{"first start": rs.FirstStart, "restart": rs.Restart, "failover": rs.Failover} {
		// At least the kubeconfig Secret of every cluster is read.
		if c.InSync != 20 || c.Seconds <= 0 || c.PerCluster < 1 || c.Hub.ByVerb["get secrets"] < 20 ||
			c.ControllerCPUS <= 0 || c.MachineBusyPct <= 0 || c.MachineBusyPct > 100 ||
			c.HubCPUS <= 0 || c.APIServersCPUS <= c.HubCPUS || c.PeakRSSMiB <= 0 {
			t.Errorf("%s: %+v", name, c)
		}
	}
	// An empty hub: every MachinePoolSync is created.
	if c := rs.FirstStart; c.Hub.ByVerb["create machinepoolsyncs"] < 20 {
		t.Errorf("first start: %+v", c)
	}
	// Statuses right: one Secret read per cluster, nothing written but the
	// leader election Event.
	for name, c := range map[string]bench.RestartCase{"restart": rs.Restart, "failover": rs.Failover} {
		if c.PerCluster > 2 || c.WritesPerCluster > 0.1 {
			t.Errorf("%s cost: %+v", name, c)
		}
		// On the spokes, each cluster's connect: a probe, then a list and a watch a kind.
		if c.SpokePerCluster < 7 || c.Spoke.ByVerb["get"] < 20 || c.Spoke.ByVerb["watch"] < 60 || c.Spoke.ByVerb["list"] < 60 || c.Spoke.Writes() != 0 {
			t.Errorf("%s spoke requests: %.2f per cluster, %v", name, c.SpokePerCluster, c.Spoke.ByVerb)
		}
	}
	if f := rs.Failover; f.LeaseTakeoverS <= 0 || f.LeaseTakeoverS > f.Seconds || f.Standby == nil || f.Standby.Watches == 0 {
		t.Errorf("failover: %+v", f)
	}
	if d := rep.Detection; d.Skipped != "" || len(d.Cases) != 3 || d.RecoveredS <= 0 {
		t.Errorf("detection: %+v", d)
	} else {
		for f, c := range d.Cases {
			if c.MetricS <= 0 || c.StatusS <= 0 || c.MetricS > 60 || c.StatusS > 60 || c.Reason == "" {
				t.Errorf("detection %s: %+v", f, c)
			}
		}
	}
	rc := rep.Reaction
	if rc.NewNode.N+rc.BornInSync != 10 || rc.Removal.N != 10 || rc.Removal.P99Ms <= 0 {
		t.Errorf("reaction: %+v", rc)
	}
	// The samples ran while the Nodes posted, each post one watch event at the controller (a
	// cluster a spoke), and every status was put back; the controller's CPU and RSS were read.
	if hb := rc.Heartbeats; hb.Posted < 3 || hb.Failed != 0 || hb.Events != hb.Posted || hb.NodeBytes < 8<<10 || !hb.Restored ||
		rc.FastSpokes != 1 || rc.WindowS <= 0 || rc.ControllerCPUPercent <= 0 || rc.RSSMiB <= 0 {
		t.Errorf("reaction heartbeats: %+v", rc)
	}
	if iso := rep.Isolation; iso.Skipped != "" || iso.BlackHoleMs <= 0 || iso.DelayMs <= 0 || iso.BaselineMs <= 0 {
		t.Errorf("isolation: %+v", iso)
	}
	if m := rep.Memory; m.Idle0.RSSMiB <= 0 || m.Idle0.HeapInuseMiB <= 0 || m.At.Memory.RSSMiB <= 0 || m.K != 1 {
		t.Errorf("memory: %+v", m)
	}
	if m := rep.Memory; m.MaxRealReached != 5 || m.MaxRealInSync != 5 {
		t.Errorf("real-spoke ceiling: %+v", m)
	}
	if s := rep.Sim; s.Skipped != "" || s.InSync != 20 || s.Memory.RSSMiB <= 0 || s.NodesLabelled != 20 || !s.Extrapolated || s.RealSpokes != 4 ||
		s.CacheNodes != 5 || s.CacheMachines != 5 || s.CacheMachineSets != 5 { // 20 clusters over 4 spokes: 5 on the first, nothing else left
		t.Errorf("sim: %+v", s)
	}
	// The same 20 clusters moved onto 2 of those spokes: 10 Nodes in each cache.
	if s := rep.SimLarge; s.Skipped != "" || s.InSync != 20 || s.RealSpokes != 2 || s.CacheNodes != 10 || s.NodesLabelled != 20 ||
		s.PeakRSSMiB <= 0 || s.Memory.RSSMiB <= 0 {
		t.Errorf("sim with larger caches: %+v", s)
	}
	// Then a controller without GOMEMLIMIT adopting the same clusters again (their Machines and
	// Nodes made again unlabelled), measured at rest.
	if u := rep.SimLarge.Unlimited; u == nil || u.Skipped != "" || u.InSync != 20 || u.Memory.RSSMiB <= 0 || u.PerCluster.LiveMiB <= 0 ||
		rep.SimLarge.UnlimitedNodesLabelled != 20 || rep.SimLarge.UnlimitedSetupS <= 0 {
		t.Errorf("sim with larger caches, without GOMEMLIMIT: %+v (set up in %.1f s, %d Nodes labelled)", u, rep.SimLarge.UnlimitedSetupS, rep.SimLarge.UnlimitedNodesLabelled)
	}
	// spokes: 1, 3 (main); nodes: 2, 4.
	if len(rep.Growth) != 4 {
		t.Errorf("growth: want 4 points, got %d: %+v", len(rep.Growth), rep.Growth)
	}
	for _, p := range rep.Growth {
		if p.Wave.ConvergenceMs <= 0 || p.Wave.Drifted == 0 || p.Memory.RSSMiB <= 0 {
			t.Errorf("growth point: %+v", p)
		}
	}
	if len(rep.Goals) < 8 {
		t.Errorf("goals: %+v", rep.Goals)
	}
	// The in-sync CPU of the simulated fleet has a goal row of its own, measured over the window
	// (to the nanosecond: a few ms of CPU over 3 s are more than 0%), which runs under the CPU
	// profiler.
	cpuRow := slices.IndexFunc(rep.Goals, func(g bench.Goal) bool { return strings.HasPrefix(g.Figure, "Controller CPU at 20 clusters in sync") })
	if s := rep.Sim; s.SteadyS != 3 || s.SteadyCPUPercent <= 0 || cpuRow < 0 || rep.Goals[cpuRow].Skipped {
		t.Errorf("in-sync CPU: %.0f s, %.2f%%, goal row %d of %+v", s.SteadyS, s.SteadyCPUPercent, cpuRow, rep.Goals)
	}
	// In that window the Nodes posted real workers' statuses, each a watch event at the 5 caches
	// of its spoke (20 clusters on 4 spokes), and got their own statuses back afterwards.
	if hb := rep.Sim.Heartbeats; hb.Posted < 20 || hb.Failed != 0 || hb.Events != 5*hb.Posted || hb.NodeBytes < 8<<10 || !hb.Restored {
		t.Errorf("Node heartbeats: %+v", hb)
	}
	if fi, err := os.Stat(filepath.Join(cfg.OutDir, "controller-steady-cpu.pprof")); err != nil || fi.Size() == 0 {
		t.Errorf("in-sync CPU profile: %v", err)
	}
	// The capacity step: the recorded spoke replayed to 5 clusters in sync (no write, every
	// request answered), the events sent at each rate to the controller and to the floor.
	if cp := rep.Capacity; cp.Skipped != "" || cp.InSync != 5 || cp.Writes != 0 || cp.Unrecorded != 0 || cp.RecordedEvents != 3 ||
		cp.EventBytes < 10000 || len(cp.Controller) != 2 || len(cp.Floor) != 2 || cp.Controller[1].Achieved < 80 ||
		cp.Controller[1].USPerEvent <= 0 || cp.Floor[1].USPerEvent <= 0 || cp.ProfileRate <= 0 ||
		cp.Restart == nil || cp.Restart.InSync != 5 || cp.Restart.PeakRSSMiB <= 0 {
		t.Errorf("capacity: %+v", cp)
	}
	md := rep.Markdown()
	for _, h := range []string{"## Goals", "## 1. Write cost", "## 1a. At rest", "## 1b. Restart and failover", "## 1c. Dead spokes", "## 2. Convergence", "## 3. Reaction", "## 4. Hub memory", "## 5. Isolation", "## 6. Cost growth", "## 7. Capacity"} {
		if !strings.Contains(md, h) {
			t.Errorf("report lacks %q", h)
		}
	}
	if strings.Contains(md, "NaN") || strings.Contains(md, "Inf") {
		t.Errorf("report has NaN/Inf:\n%s", md)
	}
	if _, err := rep.JSON(); err != nil {
		t.Error(err)
	}
	t.Logf("\n%s", md)
}
