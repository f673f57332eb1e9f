package bench

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// point runs the controller with only spokes connected, measures memory
// after adoption, then a pool change.
func (b *bench) point(ctx context.Context, dim string, spokes []*localfleet.Spoke) (Point, error) {
	pt := Point{Dimension: dim}
	if _, err := b.setPaused(ctx, keys(spokes)); err != nil {
		return pt, err
	}
	proc, err := b.startController(ctx, fmt.Sprintf("%s-%d", dim, len(spokes)))
	if err != nil {
		return pt, err
	}
	defer proc.stop()
	if err := b.waitInSync(ctx, proc, len(spokes), b.cfg.ConvergeTimeout); err != nil {
		return pt, err
	}
	b.atRest()
	if pt.Memory, err = proc.memory(); err != nil {
		return pt, err
	}
	// Where the bytes go: the heap (live objects by allocation site, after the GC
	// memory() forced) and the goroutines, beside the report.
	for _, kind := range []string{"heap", "goroutine"} {
		_, nodes := b.watchers[spokes[0].Name].counts(machineSetName(spokes[0], pool))
		name := fmt.Sprintf("controller-%s-%dx%d-%s.pprof", dim, len(spokes), nodes, kind)
		if err := proc.saveProfile(kind, filepath.Join(b.outDir, name)); err != nil {
			b.rep.note("%s profile of the %s point: %v", kind, dim, err)
		} else if kind == "goroutine" {
			if pt.Goroutines, err = goroutineBreakdown(filepath.Join(b.outDir, name)); err != nil {
				b.rep.note("goroutine profile of the %s point: %v", dim, err)
			}
		}
	}
	if pt.Wave, err = b.runWave(ctx, proc, spokes, spokes, dim); err != nil {
		return pt, err
	}
	if dim == "nodes" {
		// The same spokes, in sync now: a controller started again connects and writes nothing.
		proc.stop()
		if r := b.restartedMemory(ctx, fmt.Sprintf("%s-%d-restarted", dim, len(spokes)), b.memLimit, len(spokes), b.cfg.ConvergeTimeout, 0); r.Skipped != "" {
			b.rep.note("restarted %s point: %s", dim, r.Skipped)
		} else {
			pt.Restarted = &r.Memory
		}
	}
	b.logf("point %s %d×%.0f: convergence %.0f ms (%.2f× ideal), %.2f req/object, heap %.1f MiB, RSS %.1f MiB", dim, pt.Wave.Spokes, pt.Wave.NodesPerSpoke, pt.Wave.ConvergenceMs, pt.Wave.Ratio, pt.Wave.PerObject, pt.Memory.HeapInuseMiB, pt.Memory.RSSMiB)
	return pt, nil
}

// atRest lets a controller whose clusters are all InSync come to rest before its memory is
// measured (Config.MemorySettle).
func (b *bench) atRest() { time.Sleep(b.cfg.MemorySettle) }

// restartedMemory starts a controller with memLimit as its GOMEMLIMIT ("": none) on n clusters
// already in sync, waits up to timeout for every one to be InSync (sampling its RSS meanwhile),
// and measures it at rest. Skipped says why it stopped short. With profile > 0, the start's first
// profile of time runs under the CPU profiler (controller-<name>-cpu.pprof).
func (b *bench) restartedMemory(ctx context.Context, name, memLimit string, n int, timeout, profile time.Duration) *RestartedRun {
	r := &RestartedRun{}
	proc, err := b.start(ctx, name, memLimit)
	if err != nil {
		r.Skipped = "failed: " + err.Error()
		return r
	}
	defer proc.stop()
	if profile > 0 {
		defer b.profileController(proc, name, profile)()
	}
	cpu0 := markCPU(proc)
	got, inSyncAt, err := b.waitStateAt(ctx, proc, fleet.StateInSync, n, timeout, func(int) {
		if rss, err := vmRSS(proc.cmd.Process.Pid); err == nil {
			r.PeakRSSMiB = max(r.PeakRSSMiB, mib(rss))
		}
	})
	r.InSync, r.AllInSyncS = got, inSyncAt.Sub(proc.started).Seconds()
	r.CPUS, r.BusyPct = markCPU(proc).since(cpu0)
	if err != nil {
		r.Skipped = fmt.Sprintf("%d of %d InSync when the wait stopped: %v", got, n, err)
		return r
	}
	b.atRest()
	if r.Memory, err = proc.memory(); err != nil {
		r.Skipped = "memory: " + err.Error()
		return r
	}
	r.PeakRSSMiB = max(r.PeakRSSMiB, r.Memory.RSSMiB)
	r.PerCluster = perSpokeOf(r.Memory, b.rep.Memory.Idle0, n)
	return r
}

// zero measures the controller with every ClusterDeployment paused.
func (b *bench) zero(ctx context.Context) (Memory, error) {
	n, err := b.setPaused(ctx, nil)
	if err != nil {
		return Memory{}, err
	}
	proc, err := b.startController(ctx, "zero")
	if err != nil {
		return Memory{}, err
	}
	defer proc.stop()
	if _, err := b.waitState(ctx, proc, fleet.StatePaused, n, b.cfg.ConvergeTimeout, nil); err != nil {
		return Memory{}, err
	}
	b.atRest()
	return proc.memory()
}

func (b *bench) growth(ctx context.Context) {
	m0, err := b.zero(ctx)
	if err != nil {
		b.rep.note("0-spoke memory baseline failed: %v", err)
		return
	}
	b.rep.Memory.Idle0 = m0
	b.logf("0 spokes: heap %.1f MiB, RSS %.1f MiB", m0.HeapInuseMiB, m0.RSSMiB)
	spokes := b.f.Spokes()
	var pts []Point
	for _, g := range b.cfg.GrowthSpokes {
		if g <= 0 || g >= len(spokes) {
			continue
		}
		pt, err := b.point(ctx, "spokes", spokes[:g])
		if err != nil {
			b.rep.note("growth point %d spokes failed: %v", g, err)
			continue
		}
		pts = append(pts, pt)
	}
	pts = append(pts, b.rep.Growth...) // the main fleet
	b.rep.Growth = nil

	// Nodes per spoke, on a second set of spokes grown in place.
	if len(b.cfg.GrowthNodes) > 0 && b.cfg.GrowthNodesSpokes > 0 {
		b.logf("growth: %d more spokes for the Nodes dimension", b.cfg.GrowthNodesSpokes)
		added, err := b.f.AddSpokes(ctx, b.cfg.GrowthNodesSpokes)
		if err == nil {
			err = b.addPools(ctx, added, b.cfg.GrowthNodes[0])
		}
		cur := b.cfg.GrowthNodes[0]
		for _, n := range b.cfg.GrowthNodes {
			if err != nil {
				b.rep.note("growth by Nodes failed: %v", err)
				break
			}
			if n > cur {
				b.logf("growth: %d → %d Nodes on %d spokes", cur, n, len(added))
				err = forEach(added, len(added), func(_ int, s *localfleet.Spoke) error {
					ms, err := s.ScaleUp(ctx, pool, n-cur)
					if err != nil {
						return err
					}
					for _, m := range ms {
						if _, err := s.LinkNode(ctx, m.Name); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					continue
				}
				cur = n
			}
			var pt Point
			pt, err = b.point(ctx, "nodes", added)
			if err == nil {
				pts = append(pts, pt)
			}
		}
	}
	for i := range pts {
		pts[i].PerSpoke = perSpokeOf(pts[i].Memory, m0, pts[i].Wave.Spokes)
		if r := pts[i].Restarted; r != nil {
			ps := perSpokeOf(*r, m0, pts[i].Wave.Spokes)
			pts[i].PerSpokeRestarted = &ps
		}
	}
	b.rep.Growth = pts
	// The hub-memory figure: the point of the Nodes dimension nearest 100 Nodes per spoke
	// (the goal's size), else the largest point.
	best := -1
	for i, p := range pts {
		if p.Dimension == "nodes" && (best < 0 || math.Abs(p.Wave.NodesPerSpoke-100) < math.Abs(pts[best].Wave.NodesPerSpoke-100)) {
			best = i
		}
	}
	for i, p := range pts {
		if best >= 0 && pts[best].Dimension == "nodes" {
			break
		}
		if best < 0 || p.Wave.NodesPerSpoke > pts[best].Wave.NodesPerSpoke || (p.Wave.NodesPerSpoke == pts[best].Wave.NodesPerSpoke && p.Wave.Spokes > pts[best].Wave.Spokes) {
			best = i
		}
	}
	if best >= 0 {
		m := &b.rep.Memory
		m.At = pts[best]
		m.K = pts[best].Wave.Spokes
		m.NodesPerSpoke = pts[best].Wave.NodesPerSpoke
		m.PerSpoke = pts[best].PerSpoke
	}
	var nodes []Point
	for _, p := range pts {
		if p.Dimension == "nodes" {
			nodes = append(nodes, p)
		}
	}
	b.rep.Memory.PerConnection, b.rep.Memory.PerNode = costLine(nodes)
}

// costLine fits each per-spoke figure of points against their Nodes per spoke by least
// squares: the intercept is what a connection costs with no Node, the slope what each Node
// (with its Machine and MachineSet share) adds. Zero with fewer than two sizes.
func costLine(points []Point) (perConnection, perNode perSpoke) {
	if len(points) < 2 {
		return
	}
	fit := func(y func(perSpoke) float64) (float64, float64) {
		var n, sx, sy, sxx, sxy float64
		for _, p := range points {
			x, v := p.Wave.NodesPerSpoke, y(p.PerSpoke)
			n, sx, sy, sxx, sxy = n+1, sx+x, sy+v, sxx+x*x, sxy+x*v
		}
		d := n*sxx - sx*sx
		if d == 0 {
			return 0, 0
		}
		slope := (n*sxy - sx*sy) / d
		return (sy - slope*sx) / n, slope
	}
	perConnection.HeapMiB, perNode.HeapMiB = fit(func(p perSpoke) float64 { return p.HeapMiB })
	perConnection.LiveMiB, perNode.LiveMiB = fit(func(p perSpoke) float64 { return p.LiveMiB })
	perConnection.StackMiB, perNode.StackMiB = fit(func(p perSpoke) float64 { return p.StackMiB })
	perConnection.RSSMiB, perNode.RSSMiB = fit(func(p perSpoke) float64 { return p.RSSMiB })
	perConnection.AnonMiB, perNode.AnonMiB = fit(func(p perSpoke) float64 { return p.AnonMiB })
	perConnection.FileMiB, perNode.FileMiB = fit(func(p perSpoke) float64 { return p.FileMiB })
	perConnection.Goroutines, perNode.Goroutines = fit(func(p perSpoke) float64 { return p.Goroutines })
	return
}

func (b *bench) maxReal(ctx context.Context) {
	m := &b.rep.Memory
	m.MaxRealTarget = b.cfg.MaxRealSpokes
	if b.cfg.MaxRealSpokes <= 0 {
		b.rep.note("The real-spoke ceiling was skipped (`-max-real-spokes 0`).")
		return
	}
	have := len(b.f.Spokes())
	need := b.cfg.MaxRealSpokes - have
	b.logf("max real spokes: adding %d spokes with %d Nodes each", max(need, 0), b.cfg.MaxRealNodes)
	if need > 0 {
		added, err := b.f.AddSpokes(ctx, need)
		if err != nil {
			m.MaxRealNote = fmt.Sprintf("adding spokes stopped: %v", err)
		}
		if err := b.addPools(ctx, added, b.cfg.MaxRealNodes); err != nil {
			m.MaxRealNote += fmt.Sprintf(" pools: %v", err)
		}
	}
	all := b.f.Spokes()
	m.MaxRealReached = len(all)
	if _, err := b.setPaused(ctx, keys(all)); err != nil {
		m.MaxRealNote += err.Error()
		return
	}
	proc, err := b.startController(ctx, "max-real")
	if err != nil {
		m.MaxRealNote += err.Error()
		return
	}
	defer proc.stop()
	got, err := b.waitState(ctx, proc, fleet.StateInSync, len(all), b.cfg.ConvergeTimeout, nil)
	m.MaxRealInSync = got
	if err != nil {
		m.MaxRealNote += fmt.Sprintf(" %v", err)
	}
	b.atRest()
	m.MaxRealMemory, _ = proc.memory()
	b.logf("max real spokes: %d started, %d InSync", m.MaxRealReached, got)
}
