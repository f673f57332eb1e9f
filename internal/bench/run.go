package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

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
	pausedKey  = nmsync.AnnotationPaused
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
	deployEnv      []string // its environment there, KEY=VALUE
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
	rep.Capacity.Skipped = "the step did not run" // until capacity runs
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
	if cfg.Only == "" {
		b.growth(ctx)
		b.maxReal(ctx)
		b.sim(ctx)
	}
	b.capacity(ctx)
	rep.Duration = time.Since(rep.Started).Round(time.Second).String()
	rep.Judge()
	return rep, nil
}

func (b *bench) main(ctx context.Context) error {
	cfg := b.cfg
	b.logf("starting a hub and %d spokes (audit logs on)", cfg.Spokes)
	start := time.Now()
	if cfg.ControlPlaneGOGC != "" {
		b.rep.note("override: etcd and the API servers ran with GOGC=%s (less CPU to start, more memory); make bench runs them as they ship", cfg.ControlPlaneGOGC)
	}
	if cfg.ControlPlaneGOMAXPROCS > 0 {
		b.rep.note("override: etcd and the API servers ran with GOMAXPROCS=%d (less CPU, one thread of Go code each); make bench runs them as they ship", cfg.ControlPlaneGOMAXPROCS)
	}
	f, err := localfleet.Start(ctx, localfleet.Options{Spokes: cfg.Spokes, Audit: true, HubAuditUsers: []string{ctrlHubUser}, Log: cfg.FleetLog,
		ControlPlaneGOGC: cfg.ControlPlaneGOGC, ControlPlaneGOMAXPROCS: cfg.ControlPlaneGOMAXPROCS})
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
	limit, err := deploymentMemoryLimit(rendered)
	if err != nil {
		return err
	}
	b.rep.Config.DeploymentMemoryLimit, b.rep.Config.MemoryLimitRatio = limit, fleet.MemoryLimitRatio
	if b.rep.Config.SLOObjectiveS, err = sloObjective(rendered); err != nil {
		return err
	}
	switch cfg.GOMEMLIMIT {
	case "":
		b.memLimit = strconv.FormatInt(int64(float64(limit)*fleet.MemoryLimitRatio), 10)
	case "off":
	default:
		b.memLimit = cfg.GOMEMLIMIT
	}
	b.rep.Config.GOMEMLIMIT = b.memLimit
	if b.deployArgs, err = deploymentArgs(rendered); err != nil {
		return err
	}
	if b.deployEnv, err = deploymentEnv(rendered); err != nil {
		return err
	}
	b.rep.Config.DeployEnv = b.deployEnv
	if b.rep.Config.ResyncPeriod, err = shippedResync(b.deployArgs); err != nil {
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
	if cfg.Only != "" {
		b.rep.note("-only %s: the other steps did not run", cfg.Only)
		return nil
	}
	// The baseline runs with the controller up and in sync, so its writes pay for the same
	// watches (the controller's and the bench's) as the controller's writes do; they touch a
	// label no pool owns, so the controller only re-reads and writes nothing.
	if err := b.baseline(ctx, proc, spokes); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	b.atRest()
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
	if pc := w1.Propagation; pc != nil {
		b.logf("convergence: propagation histogram p99 %.0f ms %s, bench p99 %.0f ms %s, %d of %d changes counted", pc.HistogramP99Ms, pc.HistogramBucket, pc.MeasuredP99Ms, pc.MeasuredBucket, pc.Observed, pc.Pools)
	}

	// 5: isolation.
	if nDeg == 0 {
		b.rep.Isolation.Skipped = "needs 2 or more spokes and a degraded fraction"
	} else if err := b.isolation(ctx, proc, spokes, healthy, degraded, proxies, healthyMs(w1, healthy)); err != nil {
		b.rep.Isolation.Skipped = "failed: " + err.Error()
		b.rep.note("isolation step failed: %v", err)
	}

	// 3: reaction, on healthy spokes.
	if err := b.reaction(ctx, proc, healthy); err != nil {
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

// JSON renders the report as indented JSON.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

var _ io.Writer = (*os.File)(nil)
