package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The report names the commit it measured, and says when the tree had uncommitted changes.
func TestCodeText(t *testing.T) {
	tests := []struct{ describe, commit, want string }{
		{"dev", "unknown", "a build without its commit stamped (make bench stamps it)"},
		{"9d196d9", "9d196d9", "9d196d9 (commit 9d196d9)"},
		{"9d196d9-dirty", "9d196d9", "9d196d9 (commit 9d196d9) with uncommitted changes"},
	}
	for _, tt := range tests {
		if got := codeText(tt.describe, tt.commit); got != tt.want {
			t.Errorf("codeText(%q, %q) = %q, want %q", tt.describe, tt.commit, got, tt.want)
		}
	}
}

// A soft limit other than the one config/hub ships is printed as an override beside the
// memory figures, never as what config/hub runs.
func TestGOMEMLIMITNote(t *testing.T) {
	tests := map[string]struct {
		gomemlimit     string
		want, wantNot  string
		limitNoteWants string
	}{
		"shipped":    {"966367641", "run as config/hub runs it, GOMEMLIMIT 966367641 bytes (90% of", "override", "the shipped soft limit"},
		"overridden": {"805306368", "override: GOMEMLIMIT 805306368 bytes (config/hub runs with 966367641 bytes)", "as config/hub runs it", "an overridden soft limit"},
		"unset":      {"", "override: GOMEMLIMIT unset (config/hub runs with 966367641 bytes)", "as config/hub runs it", "without GOMEMLIMIT"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := &Report{}
			r.Config.DeploymentMemoryLimit, r.Config.MemoryLimitRatio, r.Config.GOMEMLIMIT = 1<<30, 0.9, tc.gomemlimit
			if got := r.gomemlimitNote(); !strings.Contains(got, tc.want) || strings.Contains(got, tc.wantNot) {
				t.Errorf("gomemlimitNote() = %q, want it to say %q and not %q", got, tc.want, tc.wantNot)
			}
			if got := r.memoryLimitNote(); !strings.Contains(got, tc.limitNoteWants) {
				t.Errorf("memoryLimitNote() = %q, want it to say %q", got, tc.limitNoteWants)
			}
		})
	}
}

// The in-sync CPU row passes only on a window that outlasts the resync period and holds a
// reconcile a cluster and the Nodes' heartbeats, at the goal's 2,000 clusters, under 5% of a
// core plus 50 µs for each of the window's Node events (4,800 posts at 42 caches over 720 s:
// 280 a second, 1.4% more).
func TestSteadyCPUGoal(t *testing.T) {
	for _, c := range []struct {
		name       string
		clusters   int
		windowS    float64
		reconciles float64
		heartbeats int64
		percent    float64
		pass       bool
	}{
		{"met", 2000, 720, 2050, 4800, 3, true},
		{"met with the events' budget", 2000, 720, 2050, 4800, 6.3, true},
		{"over the goal", 2000, 720, 2050, 4800, 6.5, false},
		{"a window without every resync", 2000, 120, 2050, 4800, 3, false},
		{"fewer reconciles than clusters", 2000, 720, 1500, 4800, 3, false},
		{"too few clusters", 200, 720, 250, 4800, 3, false},
		{"no heartbeats", 2000, 720, 2050, 0, 3, false},
	} {
		r := &Report{}
		r.Config.ResyncPeriod = 10 * time.Minute
		r.Sim.Clusters, r.Sim.InSync, r.Sim.SteadyS, r.Sim.SteadyCPUPercent = c.clusters, c.clusters, c.windowS, c.percent
		r.Sim.SteadyReconciles = c.reconciles
		r.Sim.Heartbeats = heartbeatTally{Posted: c.heartbeats, Events: 42 * c.heartbeats, NodeBytes: 12 << 10, Restored: true}
		r.Judge()
		i := slices.IndexFunc(r.Goals, func(g Goal) bool { return strings.HasPrefix(g.Figure, "Controller CPU at") })
		if i < 0 {
			t.Fatalf("%s: no CPU row in %+v", c.name, r.Goals)
		}
		if g := r.Goals[i]; g.Pass != c.pass || g.Skipped {
			t.Errorf("%s: %+v, want pass %v", c.name, g, c.pass)
		}
	}
}

// Goal 1 is judged at a shard's scale once that run was made at 2,000 clusters: the 10-spoke
// row is then reported, and the shard's row passes only on a whole adoption of caches of 100
// Nodes or more, at or under 0.5 MiB RSS a cluster. Without it, the 10-spoke row judges.
func TestPerSpokeMemoryGoal(t *testing.T) {
	const judges, reported, none = "judges", "reported", ""
	for _, c := range []struct {
		name     string
		clusters int // 0: no shard run
		skipped  string
		tenRSS   float64
		shardRSS float64
		nodes    int
		labelled int
		inSync   int
		ten      string // what the 10-spoke row does
		tenPass  bool
		shard    string // "pass", "miss", "skipped", or none (no row)
	}{
		{"met at scale, not at 10", 2000, "", 0.92, 0.40, 100, 2000, 2000, reported, false, "pass"},
		{"met at scale and at 10: still only reported", 2000, "", 0.45, 0.40, 100, 2000, 2000, reported, false, "pass"},
		{"missed at scale", 2000, "", 0.92, 0.55, 100, 2000, 2000, reported, false, "miss"},
		{"not a whole adoption", 2000, "", 0.92, 0.40, 100, 1999, 2000, reported, false, "miss"},
		{"not all InSync", 2000, "", 0.92, 0.40, 100, 2000, 1999, reported, false, "miss"},
		{"small caches", 2000, "", 0.92, 0.40, 42, 2000, 2000, reported, false, "miss"},
		{"fewer clusters than a shard: 10 spokes judge", 20, "", 0.92, 0.40, 100, 20, 20, judges, false, "miss"},
		{"the shard run failed: 10 spokes judge", 2000, "memory: no answer", 0.45, 0, 100, 0, 0, judges, true, "skipped"},
		{"no shard run: 10 spokes judge, missed", 0, "", 0.92, 0, 0, 0, 0, judges, false, none},
		{"no shard run: 10 spokes judge, met", 0, "", 0.45, 0, 0, 0, 0, judges, true, none},
	} {
		r := &Report{}
		r.Config.SimNodes = 1
		r.Memory.K, r.Memory.NodesPerSpoke, r.Memory.PerSpoke.RSSMiB = 10, 100, c.tenRSS
		if c.clusters > 0 {
			r.SimLarge.Clusters, r.SimLarge.CacheNodes, r.SimLarge.UnlimitedNodesLabelled = c.clusters, c.nodes, c.labelled
			r.SimLarge.Unlimited = &RestartedRun{InSync: c.inSync, Skipped: c.skipped}
			r.SimLarge.Unlimited.PerCluster.RSSMiB = c.shardRSS
		} else {
			r.SimLarge.Skipped = "-sim-large-real-spokes 0"
		}
		r.Judge()
		ten := slices.IndexFunc(r.Goals, func(g Goal) bool { return strings.HasPrefix(g.Figure, "Hub memory per connected spoke (10 spokes") })
		shard := slices.IndexFunc(r.Goals, func(g Goal) bool {
			return strings.HasPrefix(g.Figure, "Hub memory per connected spoke at a shard's scale")
		})
		if ten < 0 || (shard >= 0) != (c.shard != none) {
			t.Fatalf("%s: rows %d, %d in %+v", c.name, ten, shard, r.Goals)
		}
		if g := r.Goals[ten]; g.Pass != c.tenPass || g.Reported != (c.ten == reported) || g.Skipped {
			t.Errorf("%s: 10-spoke row %+v, want %s, pass %v", c.name, g, c.ten, c.tenPass)
		}
		if shard >= 0 {
			g := r.Goals[shard]
			got := map[bool]string{true: "pass", false: "miss"}[g.Pass]
			if g.Skipped {
				got = "skipped"
			}
			if got != c.shard || g.Reported {
				t.Errorf("%s: shard row %+v, want %s", c.name, g, c.shard)
			}
		}
	}
}

// The peaks a pod is sized by are reported, never judged, and say which runs did not happen.
func TestPeaksRow(t *testing.T) {
	r := &Report{}
	r.SimLarge.Clusters, r.SimLarge.InSync, r.SimLarge.CacheNodes, r.SimLarge.PeakRSSMiB = 2000, 2000, 100, 950
	r.SimLarge.Unlimited = &RestartedRun{InSync: 2000, PeakRSSMiB: 1361}
	r.SimLarge.Restarted = &RestartedRun{InSync: 2000, PeakRSSMiB: 880}
	r.Judge()
	i := slices.IndexFunc(r.Goals, func(g Goal) bool { return strings.HasPrefix(g.Figure, "Peak RSS at a shard's scale") })
	if i < 0 {
		t.Fatalf("no peaks row in %+v", r.Goals)
	}
	g := r.Goals[i]
	want := "adoption 950 MiB with the soft limit, 1361 MiB without; restart in sync 880 MiB with, not run without"
	if !g.Reported || g.Pass || g.Measured != want {
		t.Errorf("peaks row %+v, want reported %q", g, want)
	}
	r = &Report{}
	r.SimLarge.Skipped = "-sim-large-real-spokes 0"
	r.Judge()
	if slices.ContainsFunc(r.Goals, func(g Goal) bool { return strings.HasPrefix(g.Figure, "Peak RSS") }) {
		t.Errorf("a peaks row without the larger caches' run: %+v", r.Goals)
	}
}
