package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	hub "github.com/openshift/hub-node-metadata/config/hub"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

const (
	pool       = "bench"
	waveKey    = "bench.example.com/wave"
	roleKey    = "node-role.kubernetes.io/bench"
	hubOnlyKey = "bench.example.com/hub-only"
	taintKey   = "bench.example.com/dedicated"
	pausedKey  = fleet.AnnotationPaused
)

type bench struct {
	cfg            Config
	rep            *Report
	f              *localfleet.Fleet
	outDir         string
	ctrlKubeconfig string
	watchers       map[string]*watcher
	wave           map[string]string // spoke -> current wave value
	waveN          int
	mu             sync.Mutex
	defaults       fleet.Options
	watchCtx       context.Context
	memLimit       string   // GOMEMLIMIT for the controller, from config/hub's Deployment
	deployArgs     []string // the controller's flags in config/hub's Deployment
	hub            *hubLog  // the hub's audit log of the controllers' requests
}

func (b *bench) logf(format string, a ...any) {
	if b.cfg.Log != nil {
		fmt.Fprintf(b.cfg.Log, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
}

// Run runs the whole benchmark and returns its report. Errors in optional
// steps are recorded in the report's notes; errors that make the main
// figures impossible are returned.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.RepoRoot == "" {
		root, err := findRoot()
		if err != nil {
			return nil, err
		}
		cfg.RepoRoot = root
	}
	if cfg.ConvergeTimeout <= 0 {
		cfg.ConvergeTimeout = 5 * time.Minute
	}
	if cfg.ReactionConcurrency <= 0 {
		cfg.ReactionConcurrency = 1
	}
	if cfg.RestartTimeout <= 0 {
		cfg.RestartTimeout = cfg.SimTimeout
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	rep := &Report{Started: time.Now()}
	b := &bench{cfg: cfg, rep: rep, outDir: cfg.OutDir, watchers: map[string]*watcher{}, wave: map[string]string{},
		defaults: fleet.Options{}.WithDefaults()}
	b.fillConfig()
	defer func() { rep.Duration = time.Since(rep.Started).Round(time.Second).String() }()
	watchCtx, stopWatchers := context.WithCancel(ctx)
	b.watchCtx = watchCtx
	defer func() {
		stopWatchers()
		if b.f != nil {
			b.logf("stopping the fleet")
			_ = b.f.Stop()
		}
	}()
	if err := b.main(ctx); err != nil {
		rep.Judge()
		return rep, err
	}
	b.growth(ctx)
	b.maxReal(ctx)
	b.sim(ctx)
	rep.Duration = time.Since(rep.Started).Round(time.Second).String()
	rep.Judge()
	return rep, nil
}

func (b *bench) fillConfig() {
	c, r := b.cfg, &b.rep.Config
	r.Spokes, r.Nodes, r.ReactionSamples = c.Spokes, c.Nodes, c.ReactionSamples
	r.SimClusters, r.SimRealSpokes, r.SimNodes, r.MaxRealSpokes = c.SimClusters, c.SimRealSpokes, c.SimNodes, c.MaxRealSpokes
	r.Idle, r.Delay = c.Idle.String(), c.Delay.String()
	r.GrowthSpokes, r.GrowthNodes, r.GrowthNodesSpokes = c.GrowthSpokes, c.GrowthNodes, c.GrowthNodesSpokes
	r.HubQPS, r.HubBurst, r.SpokeQPS, r.SpokeBurst = c.HubQPS, c.HubBurst, c.SpokeQPS, c.SpokeBurst
	r.MaxConcurrentClusters, r.WritesPerCluster = b.defaults.MaxConcurrentClusters, b.defaults.WritesPerCluster
	b.rep.Machine = machine()
}

func machine() string {
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb uint64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d CPUs%s, %s/%s, %s", runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

func machineSetName(s *localfleet.Spoke, p string) string {
	return fmt.Sprintf("%s-%s-%s", s.InfraID, p, localfleet.Zone)
}

// forEach runs fn for every spoke, limit at a time.
func forEach(spokes []*localfleet.Spoke, limit int, fn func(i int, s *localfleet.Spoke) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, max(limit, 1))
	for i, s := range spokes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i, s); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func (b *bench) addPools(ctx context.Context, spokes []*localfleet.Spoke, replicas int) error {
	return forEach(spokes, 8, func(_ int, s *localfleet.Spoke) error {
		_, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, pool).
			WithReplicas(replicas).
			WithLabels(map[string]string{roleKey: "", waveKey: "w0"}).
			WithTaints(localfleet.Taint(taintKey, "bench", corev1.TaintEffectNoSchedule)))
		if err != nil {
			return err
		}
		w, err := newWatcher(b.watchCtx, s)
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.watchers[s.Name] = w
		b.wave[s.Name] = "w0"
		b.mu.Unlock()
		return nil
	})
}

func (b *bench) main(ctx context.Context) error {
	cfg := b.cfg
	b.logf("starting a hub and %d spokes (audit logs on)", cfg.Spokes)
	start := time.Now()
	f, err := localfleet.Start(ctx, localfleet.Options{Spokes: cfg.Spokes, Audit: true, HubAuditUsers: []string{ctrlHubUser}, Log: cfg.FleetLog})
	if err != nil {
		return fmt.Errorf("start fleet: %w", err)
	}
	b.f = f
	b.rep.Setup.FleetStartS = time.Since(start).Seconds()
	b.logf("fleet up in %s", time.Since(start).Round(time.Millisecond))

	rendered, err := hub.Render(filepath.Join(cfg.RepoRoot, "config", "hub", "base"))
	if err != nil {
		return err
	}
	switch cfg.GOMEMLIMIT {
	case "":
		if b.memLimit, err = deploymentMemoryLimit(rendered); err != nil {
			return err
		}
	case "off":
	default:
		b.memLimit = cfg.GOMEMLIMIT
	}
	b.rep.Config.GOMEMLIMIT = b.memLimit
	if b.deployArgs, err = deploymentArgs(rendered); err != nil {
		return err
	}
	b.rep.Config.DeployArgs, b.rep.Config.Overrides = b.deployArgs, append(b.overrides(), b.envOverrides()...)
	user, err := f.InstallControllerIdentity(ctx, rendered)
	if err != nil {
		return err
	}
	// The controller authenticates as a user of its own, the one the hub's
	// audit log records, and impersonates config/hub's ServiceAccount.
	ctrlCfg, err := f.HubUser(ctrlHubUser)
	if err != nil {
		return err
	}
	b.ctrlKubeconfig = filepath.Join(b.outDir, "controller.kubeconfig")
	if err := controllerKubeconfig(b.ctrlKubeconfig, ctrlCfg, user); err != nil {
		return err
	}
	b.hub = &hubLog{path: f.Hub.AuditLogPath}

	spokes := f.Spokes()
	start = time.Now()
	if err := b.addPools(ctx, spokes, cfg.Nodes); err != nil {
		return fmt.Errorf("pools: %w", err)
	}
	b.rep.Setup.PoolsS = time.Since(start).Seconds()
	b.logf("pools (%d Machines and Nodes per spoke) in %s", cfg.Nodes, time.Since(start).Round(time.Millisecond))

	// Degraded spokes sit behind a proxy from the start.
	nDeg := 0
	if cfg.DegradedFraction > 0 && len(spokes) >= 2 {
		nDeg = max(1, int(math.Round(cfg.DegradedFraction*float64(len(spokes)))))
		nDeg = min(nDeg, len(spokes)-1)
	}
	healthy, degraded := spokes[:len(spokes)-nDeg], spokes[len(spokes)-nDeg:]
	var proxies []*localfleet.Proxy
	for _, s := range degraded {
		p, err := s.UseProxy(ctx)
		if err != nil {
			return err
		}
		proxies = append(proxies, p)
		b.rep.Isolation.Degraded = append(b.rep.Isolation.Degraded, s.Name)
	}
	b.rep.Isolation.Healthy = len(healthy)

	b.logf("starting the controller")
	start = time.Now()
	proc, err := b.startController(ctx, "main")
	if err != nil {
		return err
	}
	defer proc.stop()
	if err := b.waitInSync(ctx, proc, len(spokes), cfg.ConvergeTimeout); err != nil {
		return fmt.Errorf("initial adoption: %w", err)
	}
	b.rep.Setup.AdoptionS = time.Since(start).Seconds()
	b.logf("every cluster InSync (adopted) after %s", time.Since(start).Round(time.Millisecond))
	// The baseline runs with the controller up and in sync, so its writes pay for the same
	// watches (the controller's and the bench's) as the controller's writes do; they touch a
	// label no pool owns, so the controller only re-reads and writes nothing.
	if err := b.baseline(ctx, proc, spokes); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	time.Sleep(3 * time.Second)
	memMain, err := proc.memory()
	if err != nil {
		return err
	}

	// 1 + 2: a pool change on every spoke.
	w1, err := b.runWave(ctx, proc, spokes, spokes, "main")
	if err != nil {
		return fmt.Errorf("convergence: %w", err)
	}
	b.rep.Convergence = w1
	b.rep.Growth = append(b.rep.Growth, Point{Dimension: "spokes", Wave: w1, Memory: memMain})
	b.logf("convergence %d×%.0f: %.0f ms (ideal %.0f ms, %.2f×), %.2f requests/object", w1.Spokes, w1.NodesPerSpoke, w1.ConvergenceMs, w1.IdealMs, w1.Ratio, w1.PerObject)

	// 5: isolation.
	if nDeg == 0 {
		b.rep.Isolation.Skipped = "needs 2 or more spokes and a degraded fraction"
	} else if err := b.isolation(ctx, proc, spokes, healthy, degraded, proxies, healthyMs(w1, healthy)); err != nil {
		b.rep.Isolation.Skipped = "failed: " + err.Error()
		b.rep.note("isolation step failed: %v", err)
	}

	// 3: reaction, on healthy spokes.
	if err := b.reaction(ctx, healthy); err != nil {
		b.rep.note("reaction step failed: %v", err)
	}

	// Dead-spoke detection, with the shipped health settings.
	if nDeg == 0 || len(healthy) < 2 {
		b.rep.Detection.Skipped = "needs a degraded (proxied) spoke and 2 healthy ones"
	} else if err := b.detection(ctx, proc, degraded[0], proxies[0], healthy[len(healthy)-1], healthy[len(healthy)-2]); err != nil {
		b.rep.Detection.Skipped = "failed: " + err.Error()
		b.rep.note("detection step failed: %v", err)
	}
	proc.stop()

	// 1: at rest, a process of its own (the only one with a shortened resync).
	if err := b.idle(ctx, spokes); err != nil {
		b.rep.Idle.Skipped = "failed: " + err.Error()
		b.rep.note("at-rest step failed: %v", err)
	}
	return nil
}

// detectTimeout bounds the wait for a dead spoke to be reported.
const detectTimeout = 3 * time.Minute

// detection black-holes one spoke, kills another's API server (SIGKILL) and
// freezes a third's (SIGSTOP) at once, and times each until the controller's
// metrics say the cluster is unreachable and until its MachinePoolSync says
// Unreachable; it heals each once both are seen (SIGCONT for the frozen one)
// and waits until every cluster is in sync again.
func (b *bench) detection(ctx context.Context, proc *controllerProc, holed *localfleet.Spoke, proxy *localfleet.Proxy, killed, frozen *localfleet.Spoke) error {
	d := &b.rep.Detection
	d.Cases = map[string]*DetectCase{}
	faults := []struct {
		name        string
		s           *localfleet.Spoke
		fault, heal func() error
	}{
		{"black-holed", holed, func() error { proxy.BlackHole(true); return nil }, func() error { proxy.BlackHole(false); return nil }},
		{"killed", killed, killed.KillAPIServer, killed.StartAPIServer},
		{"frozen", frozen, frozen.FreezeAPIServer, frozen.ThawAPIServer},
	}
	if err := b.waitInSync(ctx, proc, len(b.f.Spokes()), b.cfg.ConvergeTimeout); err != nil {
		return err
	}
	// Quiet first: the last requests of the earlier steps are behind us, as
	// on a fleet at rest.
	time.Sleep(2 * time.Second)
	b.logf("detection: black-holing %s, killing %s, freezing %s", holed.Name, killed.Name, frozen.Name)
	// Each fault is healed as soon as it is reported (the proxy opened, the
	// API server restarted, SIGCONT), as an operator would; whatever is left
	// is healed on the way out.
	healed := map[string]bool{}
	heal := func(name string, fn func() error) error {
		if healed[name] {
			return nil
		}
		healed[name] = true
		if err := fn(); err != nil {
			return fmt.Errorf("heal %s: %w", name, err)
		}
		return nil
	}
	defer func() {
		for _, f := range faults {
			_ = heal(f.name, f.heal)
		}
	}()
	start := time.Now()
	for _, f := range faults {
		if err := f.fault(); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		d.Cases[f.name] = &DetectCase{Cluster: f.s.Name}
	}
	lastHeal := time.Now()
	for time.Since(start) < detectTimeout && len(healed) < len(faults) {
		sm, err := proc.scrape()
		if err != nil {
			return err
		}
		for _, f := range faults {
			c := d.Cases[f.name]
			if c.MetricS == 0 && sm.Sum("hub_node_metadata_cluster_state", map[string]string{"cluster": f.s.Key().String(), "state": fleet.StateUnreachable}) == 1 {
				c.MetricS = time.Since(start).Seconds()
				b.logf("detection: %s: cluster_state unreachable after %.1f s", f.name, c.MetricS)
			}
			if c.StatusS == 0 {
				st := &v1alpha1.MachinePoolSync{}
				if err := b.f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: f.s.Name, Name: f.s.Name + "-" + pool}, st); err == nil && st.Status.Phase == v1alpha1.PhaseUnreachable {
					c.StatusS, c.Reason = time.Since(start).Seconds(), st.Status.Reason
					b.logf("detection: %s: MachinePoolSync Unreachable/%s after %.1f s", f.name, c.Reason, c.StatusS)
				}
			}
			if c.MetricS > 0 && c.StatusS > 0 && !healed[f.name] {
				if err := heal(f.name, f.heal); err != nil {
					return err
				}
				lastHeal = time.Now()
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, f := range faults {
		if !healed[f.name] {
			if err := heal(f.name, f.heal); err != nil {
				return err
			}
			lastHeal = time.Now()
		}
	}
	if err := b.waitInSync(ctx, proc, len(b.f.Spokes()), b.cfg.ConvergeTimeout); err != nil {
		return fmt.Errorf("after healing: %w", err)
	}
	d.RecoveredS = time.Since(lastHeal).Seconds()
	b.logf("detection: every cluster in sync %.1f s after the last heal", d.RecoveredS)
	return nil
}

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
	cpuBefore, err := proc.scrape()
	if err != nil {
		return err
	}
	inFlight := b.defaults.WritesPerCluster
	clusters := min(len(spokes), b.defaults.MaxConcurrentClusters)
	var writes int
	var loaded []time.Duration
	var wmu sync.Mutex
	t0 := time.Now()
	err = forEach(spokes, clusters, func(_ int, s *localfleet.Spoke) error {
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
	if cpuAfter, err := proc.scrape(); err == nil {
		b.rep.Baseline.ControllerCPUs = cpuAfter.Sum("process_cpu_seconds_total", nil) - cpuBefore.Sum("process_cpu_seconds_total", nil)
	}
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
	deadline := time.Now().Add(timeout)
	last := 0
	for {
		s, err := proc.scrape()
		if err == nil {
			last = int(s.Sum("hub_node_metadata_clusters", map[string]string{"state": state}))
			if progress != nil {
				progress(last)
			}
			if last >= n {
				return last, nil
			}
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-proc.done:
			return last, fmt.Errorf("controller exited: %v (log %s)", proc.err, proc.logPath)
		case <-time.After(200 * time.Millisecond):
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
	w.ControllerCPUs = after.Sum("process_cpu_seconds_total", nil) - before.Sum("process_cpu_seconds_total", nil)
	w.SpokeRateWaitS = after.Sum("hub_node_metadata_remote_rate_limiter_wait_seconds_total", nil) - before.Sum("hub_node_metadata_remote_rate_limiter_wait_seconds_total", nil)
	if w.Drifted > 0 {
		w.PerObject = float64(w.AuditPatches) / float64(w.Drifted)
	}
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

// idleSettle is how long an idle controller is left after every cluster is
// in sync before its window opens.
const idleSettle = 5 * time.Second

// idle runs a controller of its own on the fleet in sync, with the resync
// period shortened (Config.IdleResync, printed as an override) so that the
// window spans several resyncs of every cluster, and counts every request it
// sends to the spokes (their audit logs) and to the hub (the hub's).
func (b *bench) idle(ctx context.Context, spokes []*localfleet.Spoke) error {
	id := &b.rep.Idle
	var extra []string
	if b.cfg.IdleResync > 0 {
		extra = append(extra, "--resync-period="+b.cfg.IdleResync.String())
		id.Resync = b.cfg.IdleResync.String()
	}
	proc, err := b.startController(ctx, "idle", extra...)
	if err != nil {
		return err
	}
	defer proc.stop()
	if err := b.waitInSync(ctx, proc, len(spokes), b.cfg.ConvergeTimeout); err != nil {
		return err
	}
	time.Sleep(idleSettle)
	offsets := map[string]int64{}
	for _, s := range spokes {
		offsets[s.Name] = auditSize(s.AuditLogPath)
	}
	before, err := proc.scrape()
	if err != nil {
		return err
	}
	b.logf("idle window: %s (resync period %s)", b.cfg.Idle, or(id.Resync, "default"))
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-proc.done:
		return fmt.Errorf("controller exited: %v (log %s)", proc.err, proc.logPath)
	case <-time.After(b.cfg.Idle):
	}
	t1 := time.Now()
	after, err := proc.scrape()
	if err != nil {
		return err
	}
	window := t1.Sub(t0)
	id.WindowS = b.cfg.Idle.Seconds()
	id.Spokes = len(spokes)
	id.Audit = AuditCounts{ByVerb: map[string]int{}, PatchesByResource: map[string]int{}}
	for _, s := range spokes {
		c, err := countAudit(s.AuditLogPath, offsets[s.Name], t1)
		if err != nil {
			return err
		}
		id.Audit.add(c)
	}
	id.Writes, id.Reads = id.Audit.Writes(), id.Audit.Reads()
	id.ReadsPerSpokePerMin = float64(id.Reads) / float64(len(spokes)) / window.Minutes()
	id.SpokePerHour = map[string]float64{}
	for v, n := range id.Audit.ByVerb {
		id.SpokePerHour[v] = float64(n) / float64(len(spokes)) / window.Hours()
	}
	id.RemoteByVerb = map[string]int{}
	for _, v := range []string{"get", "list", "watch", "patch", "update", "create", "delete"} {
		d := after.Sum("hub_node_metadata_remote_requests_total", map[string]string{"verb": v}) - before.Sum("hub_node_metadata_remote_requests_total", map[string]string{"verb": v})
		if d != 0 {
			id.RemoteByVerb[v] = int(d)
		}
	}
	id.Patched = after.Sum("hub_node_metadata_patches_total", map[string]string{"result": "Patched"}) - before.Sum("hub_node_metadata_patches_total", map[string]string{"result": "Patched"})
	// Reconciles in the window: the resyncs happened, and cost what they cost.
	rec := map[string]string{"controller": "fleet"}
	id.Reconciles = after.Sum("controller_runtime_reconcile_total", rec) - before.Sum("controller_runtime_reconcile_total", rec)
	id.Clusters = int(after.Sum("hub_node_metadata_clusters", nil))
	time.Sleep(time.Second) // the audit backend has written the window's last entries
	if err := b.hub.poll(); err != nil {
		return err
	}
	id.Hub = b.hub.count(proc.ua, t0, t1)
	b.logf("idle: spokes %d writes, %d reads (%v); hub %d writes, %d reads, %d watches, %d Lease; %.0f reconciles", id.Writes, id.Reads, id.Audit.ByVerb, id.Hub.Writes, id.Hub.Reads, id.Hub.Watches, id.Hub.Lease, id.Reconciles)
	return nil
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

func (b *bench) reaction(ctx context.Context, spokes []*localfleet.Spoke) error {
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

	// (a) new Nodes.
	var mu sync.Mutex
	var newNode []time.Duration
	idx := make([]*localfleet.Spoke, n)
	for i := range n {
		idx[i] = spokes[i%len(spokes)]
	}
	b.logf("reaction: %d new Nodes", n)
	err := forEach(idx, b.cfg.ReactionConcurrency, func(_ int, s *localfleet.Spoke) error {
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
		_, err = wt.waitUntil(ctx, timeout, func() bool {
			h := wt.nodeHistoryLocked(node.Name)
			if len(h) == 0 {
				return false
			}
			for _, st := range h {
				if holdsPool(st, wave) {
					d = st.at.Sub(h[0].at)
					born = d == 0
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
		}
		return nil
	})
	if err != nil {
		return err
	}
	rc.NewNode = dist(newNode)

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
			if m.Labels[localfleet.LabelMachineSet] == machineSetName(s, pool) && m.Status.NodeRef != nil {
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

// setPaused pauses every ClusterDeployment on the hub except those named in
// keep (which are unpaused).
func (b *bench) setPaused(ctx context.Context, keep map[string]bool) (int, error) {
	list := &hivev1.ClusterDeploymentList{}
	if err := b.f.Hub.Client.List(ctx, list); err != nil {
		return 0, err
	}
	paused := 0
	var items []*hivev1.ClusterDeployment
	for i := range list.Items {
		items = append(items, &list.Items[i])
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ferr error
	for _, cd := range items {
		want := !keep[cd.Namespace+"/"+cd.Name]
		if want {
			paused++
		}
		if (cd.Annotations[pausedKey] == "true") == want {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			v := "null"
			if want {
				v = `"true"`
			}
			p := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, pausedKey, v)))
			if err := b.f.Hub.Client.Patch(ctx, cd, p); err != nil {
				mu.Lock()
				ferr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return paused, ferr
}

func keys(spokes []*localfleet.Spoke) map[string]bool {
	out := map[string]bool{}
	for _, s := range spokes {
		out[s.Key().String()] = true
	}
	return out
}

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
	time.Sleep(3 * time.Second)
	if pt.Memory, err = proc.memory(); err != nil {
		return pt, err
	}
	if pt.Wave, err = b.runWave(ctx, proc, spokes, spokes, dim); err != nil {
		return pt, err
	}
	b.logf("point %s %d×%.0f: convergence %.0f ms (%.2f× ideal), %.2f req/object, heap %.1f MiB, RSS %.1f MiB", dim, pt.Wave.Spokes, pt.Wave.NodesPerSpoke, pt.Wave.ConvergenceMs, pt.Wave.Ratio, pt.Wave.PerObject, pt.Memory.HeapInuseMiB, pt.Memory.RSSMiB)
	return pt, nil
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
	time.Sleep(3 * time.Second)
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
		p := &pts[i]
		p.HeapPerSp = (p.Memory.HeapInuseMiB - m0.HeapInuseMiB) / float64(p.Wave.Spokes)
		p.RSSPerSp = (p.Memory.RSSMiB - m0.RSSMiB) / float64(p.Wave.Spokes)
	}
	b.rep.Growth = pts
	// The hub-memory figure: the largest Nodes-per-spoke point, else the
	// largest point.
	best := -1
	for i, p := range pts {
		if p.Dimension == "nodes" {
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
		m.HeapPerSpoke, m.RSSPerSpoke = pts[best].HeapPerSp, pts[best].RSSPerSp
	}
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
	time.Sleep(3 * time.Second)
	m.MaxRealMemory, _ = proc.memory()
	b.logf("max real spokes: %d started, %d InSync", m.MaxRealReached, got)
}

// JSON renders the report as indented JSON.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

var _ io.Writer = (*os.File)(nil)
