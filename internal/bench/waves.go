package bench

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

func healthyMs(w Wave, healthy []*localfleet.Spoke) float64 {
	m := 0.0
	for _, s := range healthy {
		m = math.Max(m, w.PerSpokeMs[s.Name])
	}
	return m
}

// baseline measures the patch round-trip, the watch hop and the direct
// write floor, with the controller running and in sync.
func (b *bench) baseline(ctx context.Context, proc *controllerProc, spokes []*localfleet.Spoke) error {
	var rtts, hops []time.Duration
	for i, s := range spokes[:min(5, len(spokes))] {
		w := b.watchers[s.Name]
		w.mu.Lock()
		var node string
		for name := range w.nodes {
			node = name
			break
		}
		w.mu.Unlock()
		for j := range 6 {
			v := fmt.Sprintf("r%d-%d", i, j)
			patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"bench.example.com/rtt":%q}}}`, v))
			n := &corev1.Node{}
			n.Name = node
			t0 := time.Now()
			if err := s.Admin.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return err
			}
			rtt := time.Since(t0)
			at, err := w.waitUntil(ctx, 10*time.Second, func() bool {
				h := w.nodes[node]
				return len(h) > 0 && h[len(h)-1].labels["bench.example.com/rtt"] == v
			})
			if err != nil {
				return err
			}
			if j > 0 { // the first warms the connection
				rtts = append(rtts, rtt)
				hops = append(hops, at.Sub(t0))
			}
		}
	}
	b.rep.Baseline.PatchRTT = dist(rtts)
	b.rep.Baseline.WatchHop = dist(hops)

	// The direct floor: the writes of a pool change, sent by a plain client.
	cpu0 := markCPU(proc)
	inFlight := b.defaults.WritesPerCluster
	clusters := min(len(spokes), b.defaults.MaxConcurrentClusters)
	var writes int
	var loaded []time.Duration
	var wmu sync.Mutex
	t0 := time.Now()
	err := forEach(spokes, clusters, func(_ int, s *localfleet.Spoke) error {
		machines, err := s.Machines(ctx, pool)
		if err != nil {
			return err
		}
		sem := make(chan struct{}, inFlight)
		var wg sync.WaitGroup
		var ferr error
		var fmu sync.Mutex
		for i := range machines {
			m := &machines[i]
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				p := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"bench.example.com/floor":"1"}}}`))
				timed := func(obj client.Object) error {
					t := time.Now()
					err := s.Admin.Patch(ctx, obj, p)
					wmu.Lock()
					loaded = append(loaded, time.Since(t))
					wmu.Unlock()
					return err
				}
				err := timed(m.DeepCopy())
				if err == nil && m.Status.NodeRef != nil {
					n := &corev1.Node{}
					n.Name = m.Status.NodeRef.Name
					err = timed(n)
				}
				if err != nil {
					fmu.Lock()
					ferr = err
					fmu.Unlock()
				}
			}()
			wmu.Lock()
			writes += 2
			wmu.Unlock()
		}
		wg.Wait()
		return ferr
	})
	if err != nil {
		return err
	}
	b.rep.Baseline.DirectFloorMs = ms(time.Since(t0))
	b.rep.Baseline.ControllerCPUs, _ = markCPU(proc).since(cpu0)
	b.rep.Baseline.DirectWrites = writes
	b.rep.Baseline.LoadedRTT = dist(loaded)
	b.rep.Baseline.LoadedInFlight = clusters * inFlight
	b.logf("patch RTT p50 %.1f ms, watch hop p50 %.1f ms, direct floor %d writes in %.0f ms", b.rep.Baseline.PatchRTT.P50Ms, b.rep.Baseline.WatchHop.P50Ms, writes, b.rep.Baseline.DirectFloorMs)
	return nil
}

// waitInSync waits until the controller's metrics show n clusters in_sync.
func (b *bench) waitInSync(ctx context.Context, proc *controllerProc, n int, timeout time.Duration) error {
	got, err := b.waitState(ctx, proc, fleet.StateInSync, n, timeout, nil)
	if err != nil {
		return fmt.Errorf("%d of %d clusters in_sync: %w", got, n, err)
	}
	return nil
}

func (b *bench) waitState(ctx context.Context, proc *controllerProc, state string, n int, timeout time.Duration, progress func(int)) (int, error) {
	got, _, err := b.waitStateAt(ctx, proc, state, n, timeout, progress)
	return got, err
}

// StallAfter ends a wait for thousands of clusters in which none has got there for that long:
// they come at several a second while the controller works through them.
const StallAfter = 2 * time.Minute

// waitStateAt waits until n clusters are in state, and also returns when the last of them got
// there, from the controller's own clocks: the latest cluster_last_sync_timestamp_seconds when
// waiting for InSync (an upper bound: a cluster synced again since counts its later sync),
// else the scrape that saw it. A fleet of thousands is scraped once a second, not five times:
// each scrape renders and parses thousands of series, which would take CPU from the run it
// measures.
//
// A wait for thousands of clusters also ends once none has reached state for StallAfter: the
// timeout bounds a slow machine's run, the stall ends a stuck one early.
func (b *bench) waitStateAt(ctx context.Context, proc *controllerProc, state string, n int, timeout time.Duration, progress func(int)) (int, time.Time, error) {
	deadline := time.Now().Add(timeout)
	large := n > 100 // thousands: scraped once a second, and a stall ends the wait
	every := 200 * time.Millisecond
	if large {
		every = time.Second
	}
	last, rose := 0, time.Now()
	for {
		s, err := proc.scrape()
		if err == nil {
			got := int(s.Sum("hub_node_metadata_clusters", map[string]string{"state": state}))
			if got > last {
				rose = time.Now()
			}
			last = got
			if progress != nil {
				progress(last)
			}
			if last >= n {
				at := time.Now()
				if latest := s.Max("hub_node_metadata_cluster_last_sync_timestamp_seconds"); state == fleet.StateInSync && latest > 0 {
					if t := time.Unix(0, int64(latest*1e9)); t.Before(at) {
						at = t
					}
				}
				return last, at, nil
			}
		}
		if time.Now().After(deadline) {
			return last, time.Now(), fmt.Errorf("timed out after %s", timeout)
		}
		if large && time.Since(rose) > StallAfter {
			return last, time.Now(), fmt.Errorf("stalled: no cluster reached %s in the last %s", state, StallAfter)
		}
		select {
		case <-ctx.Done():
			return last, time.Now(), ctx.Err()
		case <-proc.done:
			return last, time.Now(), fmt.Errorf("controller exited: %w (log %s)", proc.err, proc.logPath)
		case <-time.After(every):
		}
	}
}

// runWave changes the pool label on every spoke of changed and waits until
// every spoke of measured holds it on every Machine and Node.
func (b *bench) runWave(ctx context.Context, proc *controllerProc, changed, measured []*localfleet.Spoke, label string) (Wave, error) {
	b.waveN++
	value := fmt.Sprintf("w%d", b.waveN)
	w := Wave{Label: label, Spokes: len(measured), PerSpokeMs: map[string]float64{}}
	offsets := map[string]int64{}
	want := map[string]int{}
	for _, s := range measured {
		offsets[s.Name] = auditSize(s.AuditLogPath)
		m, n := b.watchers[s.Name].counts(machineSetName(s, pool))
		want[s.Name] = m
		w.Drifted += m + n
		w.NodesPerSpoke += float64(n)
	}
	w.NodesPerSpoke /= float64(len(measured))
	before, err := proc.scrape()
	if err != nil {
		return w, err
	}
	cpu0 := markCPU(proc)
	t0 := time.Now()
	if err := forEach(changed, len(changed), func(_ int, s *localfleet.Spoke) error {
		_, err := s.UpdatePool(ctx, pool, func(spec *hivev1.MachinePoolSpec) { spec.Labels[waveKey] = value })
		return err
	}); err != nil {
		return w, err
	}
	for _, s := range changed {
		b.wave[s.Name] = value
	}
	var mu sync.Mutex
	err = forEach(measured, len(measured), func(_ int, s *localfleet.Spoke) error {
		wt := b.watchers[s.Name]
		msName := machineSetName(s, pool)
		at, err := wt.waitUntil(ctx, b.cfg.ConvergeTimeout, func() bool { return wt.poolHoldsLocked(msName, waveKey, value, want[s.Name]) })
		if err != nil {
			return err
		}
		mu.Lock()
		w.PerSpokeMs[s.Name] = ms(at.Sub(t0))
		mu.Unlock()
		return nil
	})
	if err != nil {
		return w, err
	}
	for _, v := range w.PerSpokeMs {
		w.ConvergenceMs = math.Max(w.ConvergenceMs, v)
	}
	time.Sleep(2 * time.Second) // late writes, if any, are counted too
	// CPU is read before the scrape, which costs the controller CPU of its own.
	w.ControllerCPUs, _ = markCPU(proc).since(cpu0)
	after, err := proc.scrape()
	if err != nil {
		return w, err
	}
	for _, s := range measured {
		c, err := countAudit(s.AuditLogPath, offsets[s.Name], time.Time{})
		if err != nil {
			return w, err
		}
		w.AuditPatches += c.ByVerb["patch"]
	}
	w.MetricPatched = after.Sum("hub_node_metadata_patches_total", map[string]string{"result": "Patched"}) - before.Sum("hub_node_metadata_patches_total", map[string]string{"result": "Patched"})
	w.RemotePatches = after.Sum("hub_node_metadata_remote_requests_total", map[string]string{"verb": "patch"}) - before.Sum("hub_node_metadata_remote_requests_total", map[string]string{"verb": "patch"})
	w.SpokeRateWaitS = after.Sum("hub_node_metadata_remote_rate_limiter_wait_seconds_total", nil) - before.Sum("hub_node_metadata_remote_rate_limiter_wait_seconds_total", nil)
	if w.Drifted > 0 {
		w.PerObject = float64(w.AuditPatches) / float64(w.Drifted)
	}
	w.Propagation = propagationCheck(before, after, w.PerSpokeMs, b.rep.Config.SLOObjectiveS)
	b.ideal(&w)
	return w, nil
}

// ideal fills the wave's ideal: RTT × writes / writes in flight + one watch hop, with the
// round trip measured at the direct floor's writes in flight (the main fleet's concurrency;
// for smaller waves that is the machine's throughput at full concurrency, so their ideal
// is no easier), and the idle-RTT variant beside it.
func (b *bench) ideal(w *Wave) {
	w.Writes = w.Drifted
	w.InFlight = min(w.Spokes, b.defaults.MaxConcurrentClusters) * b.defaults.WritesPerCluster
	bl := b.rep.Baseline
	if bl.LoadedInFlight > 0 {
		w.IdealMs = bl.LoadedRTT.MeanMs*float64(w.Writes)/float64(bl.LoadedInFlight) + bl.WatchHop.P50Ms
	}
	w.IdleIdealMs = bl.PatchRTT.P50Ms*float64(w.Writes)/float64(w.InFlight) + bl.WatchHop.P50Ms
	if w.IdealMs > 0 {
		w.Ratio = w.ConvergenceMs / w.IdealMs
	}
	if w.IdleIdealMs > 0 {
		w.IdleRatio = w.ConvergenceMs / w.IdleIdealMs
	}
}

func (b *bench) isolation(ctx context.Context, proc *controllerProc, spokes, healthy, degraded []*localfleet.Spoke, proxies []*localfleet.Proxy, base1 float64) error {
	iso := &b.rep.Isolation
	b.logf("isolation: %d black-holed", len(degraded))
	for _, p := range proxies {
		p.BlackHole(true)
	}
	wb, err := b.runWave(ctx, proc, spokes, healthy, "black-hole")
	for _, p := range proxies {
		p.BlackHole(false)
	}
	if err != nil {
		return err
	}
	iso.BlackHoleMs = wb.ConvergenceMs
	b.logf("isolation: %d answering after %s", len(degraded), b.cfg.Delay)
	for _, p := range proxies {
		p.SetDelay(b.cfg.Delay)
	}
	wd, err := b.runWave(ctx, proc, spokes, healthy, "delay")
	for _, p := range proxies {
		p.SetDelay(0)
	}
	if err != nil {
		return err
	}
	iso.DelayMs = wd.ConvergenceMs
	healStart := time.Now()
	if err := forEach(degraded, len(degraded), func(_ int, s *localfleet.Spoke) error {
		wt := b.watchers[s.Name]
		ms := machineSetName(s, pool)
		m, _ := wt.counts(ms)
		_, err := wt.waitUntil(ctx, b.cfg.ConvergeTimeout, func() bool { return wt.poolHoldsLocked(ms, waveKey, b.wave[s.Name], m) })
		return err
	}); err != nil {
		return fmt.Errorf("degraded spokes after healing: %w", err)
	}
	iso.HealedAfterS = time.Since(healStart).Seconds()
	if err := b.waitInSync(ctx, proc, len(spokes), b.cfg.ConvergeTimeout); err != nil {
		return err
	}
	w4, err := b.runWave(ctx, proc, spokes, healthy, "baseline-2")
	if err != nil {
		return err
	}
	iso.BaselinesMs = []float64{base1, w4.ConvergenceMs}
	iso.BaselineMs = (base1 + w4.ConvergenceMs) / 2
	iso.BlackHoleX = safeDiv(iso.BlackHoleMs, iso.BaselineMs)
	iso.DelayX = safeDiv(iso.DelayMs, iso.BaselineMs)
	b.logf("isolation: baseline %.0f ms, black-hole %.0f ms (%.2f×), delay %.0f ms (%.2f×)", iso.BaselineMs, iso.BlackHoleMs, iso.BlackHoleX, iso.DelayMs, iso.DelayX)
	return nil
}

// holdsPool reports whether a Node state holds the bench pool's metadata
// (with the hub-only label).
func holdsPool(n nodeState, wave string) bool {
	if _, ok := n.labels[roleKey]; !ok || n.labels[hubOnlyKey] != "yes" || n.labels[waveKey] != wave {
		return false
	}
	for _, t := range n.taints {
		if t.Key == taintKey && t.Effect == corev1.TaintEffectNoSchedule && t.Value == "bench" {
			return true
		}
	}
	return false
}

func (b *bench) reaction(ctx context.Context, proc *controllerProc, spokes []*localfleet.Spoke) error {
	rc := &b.rep.Reaction
	rc.SpokesUsed, rc.Concurrency = len(spokes), b.cfg.ReactionConcurrency
	// A label changed on the hub only: the MachineSet templates lack it, so
	// new Machines and Nodes need the controller (the main one, running).
	if err := forEach(spokes, len(spokes), func(_ int, s *localfleet.Spoke) error {
		_, err := s.UpdatePoolOnHub(ctx, pool, func(spec *hivev1.MachinePoolSpec) { spec.Labels[hubOnlyKey] = "yes" })
		if err != nil {
			return err
		}
		wt := b.watchers[s.Name]
		ms := machineSetName(s, pool)
		m, _ := wt.counts(ms)
		_, err = wt.waitUntil(ctx, b.cfg.ConvergeTimeout, func() bool { return wt.poolHoldsLocked(ms, hubOnlyKey, "yes", m) })
		return err
	}); err != nil {
		return err
	}
	n := b.cfg.ReactionSamples
	timeout := 30 * time.Second

	// The samples run while the spokes' Nodes post their status as a busy shard's kubelets do.
	beats, err := b.reactionHeartbeats(ctx, spokes)
	if err != nil {
		return err
	}
	cpu0, t0 := markCPU(proc), time.Now()
	defer func() {
		cpuS, _ := markCPU(proc).since(cpu0)
		rc.WindowS = time.Since(t0).Seconds()
		rc.ControllerCPUPercent = 100 * safeDiv(cpuS, rc.WindowS)
		if m, err := proc.memory(); err == nil {
			rc.RSSMiB = m.RSSMiB
		}
		rc.Heartbeats = stopHeartbeats(ctx, beats)
		if hb := rc.Heartbeats; hb.Posted > 0 {
			b.logf("reaction: %d Node heartbeats posted (%d failed) in %.0f s, controller %.1f%% CPU, RSS %.0f MiB; statuses put back: %v", hb.Posted, hb.Failed, rc.WindowS, rc.ControllerCPUPercent, rc.RSSMiB, hb.Restored)
		}
	}()

	// (a) new Nodes.
	var mu sync.Mutex
	var newNode []time.Duration
	var tr newNodeTrace
	idx := make([]*localfleet.Spoke, n)
	for i := range n {
		idx[i] = spokes[i%len(spokes)]
	}
	b.logf("reaction: %d new Nodes", n)
	err = forEach(idx, b.cfg.ReactionConcurrency, func(_ int, s *localfleet.Spoke) error {
		added, err := s.ScaleUp(ctx, pool, 1)
		if err != nil {
			return err
		}
		node, err := s.LinkNode(ctx, added[0].Name)
		if err != nil {
			return err
		}
		wt := b.watchers[s.Name]
		wave := b.wave[s.Name]
		var d time.Duration
		born := false
		var sample newNodeSample
		_, err = wt.waitUntil(ctx, timeout, func() bool {
			h := wt.nodeHistoryLocked(node.Name)
			if len(h) == 0 {
				return false
			}
			for i, st := range h {
				if holdsPool(st, wave) {
					d = st.at.Sub(h[0].at)
					born = d == 0
					sample = traceNewNode(h, i, wt.machineFirst[added[0].Name])
					return true
				}
			}
			return false
		})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			rc.Unrepaired++
		case born:
			rc.BornInSync++
		default:
			newNode = append(newNode, d)
			tr.add(sample)
		}
		return nil
	})
	if err != nil {
		return err
	}
	rc.NewNode = dist(newNode)
	rc.NewNodeTrace = tr.report()
	b.logf("reaction: new Node trace: %s", rc.NewNodeTrace)

	// (b) out-of-band removals, each on a different Node where possible.
	b.logf("reaction: %d out-of-band removals", n)
	var removal []time.Duration
	type job struct {
		s    *localfleet.Spoke
		node string
	}
	nodesOf := map[string][]string{}
	for _, s := range spokes {
		wt := b.watchers[s.Name]
		wt.mu.Lock()
		_, ns, _ := wt.poolObjectsLocked(machineSetName(s, pool))
		var names []string
		for _, m := range wt.machines {
			if m.Labels[nmsync.LabelMachineSet] == machineSetName(s, pool) && m.Status.NodeRef != nil {
				names = append(names, m.Status.NodeRef.Name)
			}
		}
		wt.mu.Unlock()
		_ = ns
		sort.Strings(names)
		nodesOf[s.Name] = names
	}
	jobs := make([]job, n)
	for i := range n {
		s := spokes[i%len(spokes)]
		names := nodesOf[s.Name]
		jobs[i] = job{s: s, node: names[(i/len(spokes))%len(names)]}
	}
	sem := make(chan struct{}, b.cfg.ReactionConcurrency)
	var wg sync.WaitGroup
	var ferr error
	busy := map[string]bool{}
	for _, j := range jobs {
		key := j.s.Name + "/" + j.node
		for {
			mu.Lock()
			free := !busy[key]
			if free {
				busy[key] = true
			}
			mu.Unlock()
			if free {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer func() { mu.Lock(); busy[key] = false; mu.Unlock() }()
			t0 := time.Now()
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				nd := &corev1.Node{}
				if err := j.s.Admin.Get(ctx, types.NamespacedName{Name: j.node}, nd); err != nil {
					return err
				}
				delete(nd.Labels, roleKey)
				return j.s.Admin.Update(ctx, nd)
			})
			if err != nil {
				mu.Lock()
				ferr = err
				mu.Unlock()
				return
			}
			wt := b.watchers[j.s.Name]
			var d time.Duration
			_, err = wt.waitUntil(ctx, timeout, func() bool {
				var removedAt time.Time
				for _, st := range wt.nodeHistoryLocked(j.node) {
					if st.at.Before(t0) {
						continue
					}
					_, has := st.labels[roleKey]
					if !has && removedAt.IsZero() {
						removedAt = st.at
					}
					if has && !removedAt.IsZero() {
						d = st.at.Sub(removedAt)
						return true
					}
				}
				return false
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rc.Unrepaired++
				return
			}
			removal = append(removal, d)
		}()
	}
	wg.Wait()
	if ferr != nil {
		return ferr
	}
	rc.Removal = dist(removal)
	b.logf("reaction: new Node p50 %.0f p99 %.0f ms (born in sync %d); removal p50 %.0f p99 %.0f ms", rc.NewNode.P50Ms, rc.NewNode.P99Ms, rc.BornInSync, rc.Removal.P50Ms, rc.Removal.P99Ms)
	return nil
}

// reactionHeartbeats starts the reaction step's Node posts: the first ReactionFastSpokes'
// Nodes every ReactionFastHeartbeat, the others' every ReactionHeartbeat (none if that is 0).
// Each of those spokes is one cluster of the main controller, so a post is one watch event.
func (b *bench) reactionHeartbeats(ctx context.Context, spokes []*localfleet.Spoke) ([]*heartbeats, error) {
	c := b.cfg
	if c.ReactionHeartbeat <= 0 {
		return nil, nil
	}
	caches := map[string]int{}
	for _, s := range spokes {
		caches[s.Name] = 1
	}
	fast := min(max(c.ReactionFastSpokes, 0), len(spokes))
	b.rep.Reaction.FastSpokes = fast
	var beats []*heartbeats
	for _, g := range []struct {
		spokes []*localfleet.Spoke
		period time.Duration
	}{{spokes[:fast], c.ReactionFastHeartbeat}, {spokes[fast:], c.ReactionHeartbeat}} {
		if len(g.spokes) == 0 || g.period <= 0 {
			continue
		}
		h, err := startHeartbeats(ctx, g.spokes, caches, g.period)
		if err != nil {
			stopHeartbeats(ctx, beats)
			return nil, fmt.Errorf("Node heartbeats: %w", err)
		}
		beats = append(beats, h)
	}
	return beats, nil
}

// stopHeartbeats stops each of beats, puts every Node's status back, and adds up what they posted.
func stopHeartbeats(ctx context.Context, beats []*heartbeats) heartbeatTally {
	sum := heartbeatTally{Restored: true}
	for _, h := range beats {
		t := h.stop(ctx)
		sum.Posted += t.Posted
		sum.Failed += t.Failed
		sum.Events += t.Events
		sum.NodeBytes = max(sum.NodeBytes, t.NodeBytes)
		sum.PerSecond += t.PerSecond
	}
	for _, h := range beats {
		sum.Restored = h.restore(ctx) && sum.Restored
	}
	return sum
}
