package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// ControllerMain is the controller process the benchmark measures: the
// flags and defaults of `hub-controller run` (fleet.RunConfig, the same flag
// set) and the same fleet.NewManager setup, plus what only a benchmark needs:
// a log file, and /memstats, which runs a GC and returns runtime.MemStats, so
// the heap is measured after GC. Its hub user agent names its pid, so that
// the hub's audit log tells the processes of a failover apart. The benchmark
// runs it as a separate process so that its RSS is the controller's alone.
func ControllerMain(args []string) error {
	fs, rc := controllerFlags()
	kubeconfig := fs.String("kubeconfig", "", "hub kubeconfig")
	memAddr := fs.String("memstats-bind-address", "127.0.0.1:0", "memstats endpoint (bench only)")
	logPath := fs.String("log", "", "log file (bench only; default: stderr)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var out io.Writer = os.Stderr
	if *logPath != "" {
		fh, err := os.Create(*logPath)
		if err != nil {
			return err
		}
		defer fh.Close()
		out = fh
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(out)))
	// As `hub-controller run` does; the benchmark sets GOMEMLIMIT to what
	// this would find in the Deployment's container (see memoryLimit).
	if _, err := fleet.SetMemoryLimit(); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	rc.ApplyHub(cfg)
	cfg.UserAgent = hubUserAgent(os.Getpid())
	// As `hub-controller run` does: spoke audit logs name the process.
	host, _ := os.Hostname()
	rc.Options.Remote.UserAgent = fmt.Sprintf("hub-node-metadata/bench (%s; pid %d)", host, os.Getpid())
	mgr, _, err := fleet.NewManager(cfg, rc.Manager, rc.Options)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *memAddr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/memstats", func(w http.ResponseWriter, _ *http.Request) {
		// A GC halves a goroutine's stack when it uses less than a quarter of it, so stacks
		// grown during a connect (TLS handshakes, decoding) shrink over the GCs a running
		// controller does anyway (at least one every 2 minutes); run GCs until the stacks
		// stop shrinking (at most 5), to measure what stays, not the connect's peak.
		var ms runtime.MemStats
		for i, prev := 0, uint64(0); i < 5; i++ {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			if i > 0 && ms.StackInuse >= prev {
				break
			}
			prev = ms.StackInuse
		}
		if dir := os.Getenv("BENCH_HEAPDUMP_DIR"); dir != "" { // for hack/heapdump: where the heap in use goes
			if err := writeHeapDump(dir); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		_ = json.NewEncoder(w).Encode(MemStats{HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, StackInuse: ms.StackInuse, HeapUnreturned: ms.HeapIdle - ms.HeapReleased, Sys: ms.Sys,
			HeapSys: ms.HeapSys, Runtime: ms.MSpanSys + ms.MCacheSys + ms.BuckHashSys + ms.GCSys + ms.OtherSys, Goroutines: runtime.NumGoroutine()})
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap and goroutine profiles of the measured process
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go func() { _ = http.Serve(ln, mux) }()
	fmt.Printf("memstats http://%s/memstats\n", ln.Addr())
	return mgr.Start(ctrl.SetupSignalHandler())
}

// hubUserAgent is the controller process's user agent towards the hub;
// client-go appends to it (leader election sends ".../leader-election").
func hubUserAgent(pid int) string { return fmt.Sprintf("hub-node-metadata-bench (pid %d)", pid) }

// writeHeapDump writes the process's heap (runtime/debug.WriteHeapDump) into dir, named by the
// time, for hack/heapdump.
func writeHeapDump(dir string) error {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heapdump-%s", time.Now().UTC().Format("150405.000"))))
	if err != nil {
		return err
	}
	debug.WriteHeapDump(f.Fd())
	return f.Close()
}

// MemStats is what /memstats returns.
type MemStats struct {
	HeapInuse  uint64 `json:"heapInuse"`
	HeapAlloc  uint64 `json:"heapAlloc"`
	StackInuse uint64 `json:"stackInuse"`
	// HeapUnreturned is heap memory freed but not yet returned to the OS (HeapIdle −
	// HeapReleased): still in RSS until the runtime's scavenger returns it.
	HeapUnreturned uint64 `json:"heapUnreturned"`
	Sys            uint64 `json:"sys"`
	// HeapSys is the heap's address space: the most it has held at once (in use and free,
	// returned to the OS or not), which a burst sets. Runtime is the runtime's own memory
	// outside the heap and stacks (span records, GC metadata, profiling buckets, the rest),
	// which grows with that peak and is never given back.
	HeapSys    uint64 `json:"heapSys"`
	Runtime    uint64 `json:"runtime"`
	Goroutines int    `json:"goroutines"`
}

// controllerProc is a running controller process.
type controllerProc struct {
	cmd      *exec.Cmd
	metrics  string
	memstats string
	logPath  string
	ua       string        // its hub user agent (hubUserAgent)
	started  time.Time     // when it was started
	done     chan struct{} // closed when the process exits
	err      error         // its exit error, once done is closed
	stopOnce sync.Once
}

// startController runs cfg.ControllerCommand with the controller flags.
func (b *bench) startController(ctx context.Context, name string, extra ...string) (*controllerProc, error) {
	return b.start(ctx, name, b.memLimit, extra...)
}

// start starts a controller process with memLimit as its GOMEMLIMIT ("": none).
func (b *bench) start(ctx context.Context, name, memLimit string, extra ...string) (*controllerProc, error) {
	mport, err := localfleet.FreePort()
	if err != nil {
		return nil, err
	}
	sport, err := localfleet.FreePort()
	if err != nil {
		return nil, err
	}
	p := &controllerProc{
		metrics:  fmt.Sprintf("http://127.0.0.1:%d/metrics", mport),
		memstats: fmt.Sprintf("http://127.0.0.1:%d/memstats", sport),
		logPath:  filepath.Join(b.outDir, "controller-"+name+".log"),
		done:     make(chan struct{}),
	}
	// The Deployment's own flags (config/hub), the benchmark's addresses, then
	// the run's overrides (printed in the report beside what they affect).
	args := append(append([]string(nil), b.cfg.ControllerCommand[1:]...), b.deployArgs...)
	args = append(args,
		"--kubeconfig", b.ctrlKubeconfig,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", mport),
		"--health-probe-bind-address", "0",
		"--memstats-bind-address", fmt.Sprintf("127.0.0.1:%d", sport),
		"--log", p.logPath)
	args = append(args, b.overrides()...)
	args = append(args, extra...)
	p.cmd = exec.Command(b.cfg.ControllerCommand[0], args...)
	p.cmd.Env = append(append(os.Environ(), b.deployEnv...), b.cfg.ControllerEnv...)
	if memLimit != "" {
		p.cmd.Env = append(p.cmd.Env, "GOMEMLIMIT="+memLimit)
	} else {
		p.cmd.Env = append(p.cmd.Env, "AUTOMEMLIMIT=off") // nor one from this machine's cgroup
	}
	p.cmd.Stdout = io.Discard
	p.cmd.Stderr = os.Stderr
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	p.ua = hubUserAgent(p.cmd.Process.Pid)
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := p.scrape(); err == nil {
			break
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("controller exited: %w (log %s)", p.err, p.logPath)
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("controller metrics not up within 1m (log %s)", p.logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p, nil
}

// kill ends the process at once (SIGKILL), as when its node dies: no
// graceful shutdown, its Lease is not released.
func (p *controllerProc) kill() error {
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	<-p.done
	return nil
}

// interruptThenKill interrupts proc and, if it has not ended (done) within grace, kills it; it
// returns once proc has ended.
func interruptThenKill(proc *os.Process, done <-chan struct{}, grace time.Duration) {
	_ = proc.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(grace):
		_ = proc.Kill()
		<-done
	}
}

func (p *controllerProc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	p.stopOnce.Do(func() {
		interruptThenKill(p.cmd.Process, p.done, 20*time.Second)
	})
}

// scrape reads the Prometheus text exposition into name{labels} -> value, uncompressed: the
// benchmark scrapes up to five times a second while it waits for a fleet to sync, and a
// gzipped answer takes a gzip writer from a pool that each GC empties, so that during a burst
// most scrapes build a new one in the process being measured (heap profiles taken 1.5 and 3 s
// into adopting 10 spokes held 0.8 and 2.7 MiB of gzip writers, of 12 and 17 MiB in use).
// Prometheus scrapes every 30 s.
func (p *controllerProc) scrape() (Samples, error) {
	c := http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, p.metrics, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseSamples(resp.Body)
}

// saveProfile writes the process's heap or goroutine profile (pprof format) to path.
func (p *controllerProc) saveProfile(kind, path string) error {
	return savePprof(nil, strings.TrimSuffix(p.memstats, "/memstats")+"/debug/pprof/"+kind, path)
}

// savePprof writes the pprof profile at target (a /debug/pprof/ endpoint), read through
// transport (nil: the default), to path.
func savePprof(transport http.RoundTripper, target, path string) error {
	// A CPU profile answers after its window (?seconds=N): allow that on top of a minute.
	timeout := time.Minute
	if u, err := url.Parse(target); err == nil {
		if n, err := strconv.Atoi(u.Query().Get("seconds")); err == nil {
			timeout += time.Duration(n) * time.Second
		}
	}
	c := http.Client{Transport: transport, Timeout: timeout}
	resp, err := c.Get(target)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof %s: %s", target, resp.Status)
	}
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	_, err = io.Copy(fh, resp.Body)
	return err
}

// memory returns the heap after a GC and the process's VmRSS.
func (p *controllerProc) memory() (Memory, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(p.memstats)
	if err != nil {
		return Memory{}, err
	}
	defer resp.Body.Close()
	var ms MemStats
	if err := json.NewDecoder(resp.Body).Decode(&ms); err != nil {
		return Memory{}, err
	}
	st, err := procStatus(p.cmd.Process.Pid, "VmRSS", "RssAnon", "RssFile")
	if err != nil {
		return Memory{}, err
	}
	return Memory{HeapInuseMiB: mib(ms.HeapInuse), HeapAllocMiB: mib(ms.HeapAlloc), StackInuseMiB: mib(ms.StackInuse),
		UnreturnedMiB: mib(ms.HeapUnreturned), HeapSysMiB: mib(ms.HeapSys), RuntimeMiB: mib(ms.Runtime),
		RSSMiB: mib(st["VmRSS"]), AnonMiB: mib(st["RssAnon"]), FileMiB: mib(st["RssFile"]), Goroutines: ms.Goroutines}, nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// vmRSS reads VmRSS of pid from /proc.
func vmRSS(pid int) (uint64, error) {
	st, err := procStatus(pid, "VmRSS")
	return st["VmRSS"], err
}

// procStatus reads fields of /proc/<pid>/status given in kB, in bytes.
func procStatus(pid int, fields ...string) (map[string]uint64, error) {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || !slices.Contains(fields, name) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 1 {
			continue
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return nil, err
		}
		out[name] = kb * 1024
	}
	for _, f := range fields {
		if _, ok := out[f]; !ok {
			return nil, fmt.Errorf("no %s in /proc/%d/status", f, pid)
		}
	}
	return out, sc.Err()
}

// Samples are scraped metric samples: "name{k="v",...}" (labels sorted as
// exposed) -> value.
type Samples map[string]float64

func parseSamples(r io.Reader) (Samples, error) {
	out := Samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// Sum adds the samples of metric name whose labels include every k="v" in
// match.
// Max is the largest value of name's series (0 without any).
func (s Samples) Max(name string) float64 {
	m := 0.0
	for k, v := range s {
		if n, _, _ := strings.Cut(k, "{"); n == name && v > m {
			m = v
		}
	}
	return m
}

func (s Samples) Sum(name string, match map[string]string) float64 {
	total := 0.0
	for k, v := range s {
		n, labels, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		ok := true
		for mk, mv := range match {
			if !strings.Contains(labels, mk+`="`+mv+`"`) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// controllerKubeconfig writes a kubeconfig that authenticates as the hub
// admin and impersonates the controller's ServiceAccount (config/hub's RBAC).
func controllerKubeconfig(path string, admin *rest.Config, user string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	kc.AuthInfos["hub"] = &clientcmdapi.AuthInfo{
		Token:                 admin.BearerToken,
		ClientCertificateData: admin.CertData,
		ClientKeyData:         admin.KeyData,
		Impersonate:           user,
	}
	kc.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "hub"}
	kc.CurrentContext = "hub"
	return clientcmd.WriteToFile(*kc, path)
}

// managerContainer returns config/hub's rendered Deployment and its manager container.
func managerContainer(rendered []byte) (*appsv1.Deployment, *corev1.Container, error) {
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		d := &appsv1.Deployment{}
		if err := yaml.Unmarshal([]byte(doc), d); err != nil || d.Kind != "Deployment" {
			continue
		}
		for i, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "manager" {
				return d, &d.Spec.Template.Spec.Containers[i], nil
			}
		}
	}
	return nil, nil, errors.New("config/hub: no Deployment with a manager container")
}

// deploymentMemoryLimit returns the memory limit of config/hub's manager container, in bytes.
// hub-controller sets its soft limit to fleet.MemoryLimitRatio of it; the benchmark's controller
// runs outside that container's cgroup, so the benchmark passes that soft limit as GOMEMLIMIT
// (which fleet.SetMemoryLimit leaves as it is).
func deploymentMemoryLimit(rendered []byte) (int64, error) {
	_, c, err := managerContainer(rendered)
	if err != nil {
		return 0, err
	}
	q, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return 0, errors.New("config/hub: the manager container has no memory limit")
	}
	return q.Value(), nil
}

// sloObjective is the propagation SLO's threshold in config/hub's rendered PrometheusRule, in
// seconds: the le of its error_ratio rules' bucket, which must be the same in each.
func sloObjective(rendered []byte) (float64, error) {
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var les []string
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var pr struct {
			Kind string `json:"kind"`
			Spec struct {
				Groups []struct {
					Rules []rule `json:"rules"`
				} `json:"groups"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &pr); err != nil || pr.Kind != "PrometheusRule" {
			continue
		}
		for _, g := range pr.Spec.Groups {
			for _, r := range g.Rules {
				if !strings.HasPrefix(r.Record, "shard:"+propagationMetric+":error_ratio_") {
					continue
				}
				m := leLabel.FindStringSubmatch(r.Expr)
				if m == nil {
					return 0, fmt.Errorf("config/hub: %s has no le", r.Record)
				}
				les = append(les, m[1])
			}
		}
	}
	if len(les) == 0 {
		return 0, errors.New("config/hub: no propagation SLO error_ratio rule")
	}
	if slices.ContainsFunc(les, func(le string) bool { return le != les[0] }) {
		return 0, fmt.Errorf("config/hub: the propagation SLO's error_ratio rules differ in le: %v", les)
	}
	return strconv.ParseFloat(les[0], 64)
}

// controllerFlags is the controller's flag set: hub-controller run's (fleet.RunConfig), to
// which ControllerMain adds its own.
func controllerFlags() (*flag.FlagSet, *fleet.RunConfig) {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	rc := &fleet.RunConfig{}
	rc.BindFlags(fs)
	return fs, rc
}

// shippedResync is the --resync-period of a controller run with args, as its own flag set
// reads them: the Deployment's value, or the binary's default.
func shippedResync(args []string) (time.Duration, error) {
	fs, rc := controllerFlags()
	if err := fs.Parse(args); err != nil {
		return 0, fmt.Errorf("config/hub's controller args: %w", err)
	}
	return rc.Options.ResyncPeriod, nil
}

// reconcilesBetween is how many reconciles the fleet controller ran between two scrapes.
func reconcilesBetween(before, after Samples) float64 {
	rec := map[string]string{"controller": "fleet"}
	return after.Sum("controller_runtime_reconcile_total", rec) - before.Sum("controller_runtime_reconcile_total", rec)
}

// deploymentArgs returns the manager container's args in config/hub's
// rendered Deployment, without the subcommand and the bind addresses (the
// benchmark picks free ports), plus the Lease namespace a pod would take from
// its own namespace.
func deploymentArgs(rendered []byte) ([]string, error) {
	d, c, err := managerContainer(rendered)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range c.Args {
		if a == "run" || strings.HasPrefix(a, "--metrics-bind-address") || strings.HasPrefix(a, "--health-probe-bind-address") {
			continue
		}
		out = append(out, a)
		if a == "--leader-elect" {
			out = append(out, "--leader-elect-namespace="+d.Namespace)
		}
	}
	return out, nil
}

// deploymentEnv returns the manager container's environment in config/hub's rendered
// Deployment as KEY=VALUE, which every controller process of the benchmark gets (before the
// run's own -controller-env overrides). A variable taken from elsewhere (valueFrom) cannot be
// reproduced here, so it is refused rather than left out.
func deploymentEnv(rendered []byte) ([]string, error) {
	_, c, err := managerContainer(rendered)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return nil, fmt.Errorf("config/hub: the manager container's %s comes from valueFrom, which the benchmark cannot reproduce", e.Name)
		}
		out = append(out, e.Name+"="+e.Value)
	}
	return out, nil
}

// overrides are the flags this run sets away from hub-controller's defaults.
func (b *bench) overrides() []string {
	var out []string
	c := b.cfg
	if c.HubQPS != fleet.DefaultHubQPS {
		out = append(out, "--hub-qps="+strconv.FormatFloat(c.HubQPS, 'f', -1, 64))
	}
	if c.HubBurst != fleet.DefaultHubBurst {
		out = append(out, "--hub-burst="+strconv.Itoa(c.HubBurst))
	}
	if c.SpokeQPS != remote.DefaultQPS {
		out = append(out, "--spoke-qps="+strconv.FormatFloat(c.SpokeQPS, 'f', -1, 64))
	}
	if c.SpokeBurst != remote.DefaultBurst {
		out = append(out, "--spoke-burst="+strconv.Itoa(c.SpokeBurst))
	}
	return append(out, c.ControllerFlags...)
}

// envOverrides are the controller processes' extra environment, as printed.
func (b *bench) envOverrides() []string {
	var out []string
	for _, e := range b.cfg.ControllerEnv {
		out = append(out, "env "+e)
	}
	return out
}

// cpuMark is where a controller process's CPU time and the machine's CPU times stood at one
// moment, so that a span can say how much of it was the controller's own work and how busy the
// shared machine was.
type cpuMark struct {
	proc        float64 // the process's CPU seconds (0 for no process): procCPUSeconds
	busy, total float64 // all CPUs' seconds; idle and iowait are not busy
	// servers and hub are the CPU seconds of every kube-apiserver on the machine (the fleet's:
	// this benchmark starts them all) and of the hub's alone, each of those running at both
	// ends of a span (none stops during one).
	servers, hub map[int]float64
}

// markCPU reads the machine's CPU times and, when p is not nil, p's own (from procfs).
func markCPU(p *controllerProc) cpuMark {
	var m cpuMark
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return m
	}
	if p != nil {
		m.proc = procCPUSeconds(fs, p.cmd.Process.Pid)
	}
	if st, err := fs.Stat(); err == nil {
		c := st.CPUTotal
		m.total = c.User + c.Nice + c.System + c.Idle + c.Iowait + c.IRQ + c.SoftIRQ + c.Steal
		m.busy = m.total - c.Idle - c.Iowait
	}
	m.servers, m.hub = map[int]float64{}, map[int]float64{}
	if procs, err := fs.AllProcs(); err == nil {
		for _, pr := range procs {
			if comm, err := pr.Comm(); err != nil || comm != "kube-apiserver" {
				continue
			}
			st, err := pr.Stat()
			if err != nil {
				continue
			}
			m.servers[pr.PID] = st.CPUTime()
			if args, err := pr.CmdLine(); err == nil && slices.Contains(args, "--etcd-prefix=/hub") {
				m.hub[pr.PID] = st.CPUTime()
			}
		}
	}
	return m
}

// apiServers returns the CPU seconds the fleet's API servers, and the hub's alone, used from
// m0 to m.
func (m cpuMark) apiServers(m0 cpuMark) (all, hub float64) {
	for pid, s := range m.servers {
		if s0, ok := m0.servers[pid]; ok {
			all += s - s0
		}
	}
	for pid, s := range m.hub {
		if s0, ok := m0.hub[pid]; ok {
			hub += s - s0
		}
	}
	return all, hub
}

// procCPUSeconds is the CPU time pid has used, all its threads (those that exited too), to
// the nanosecond: its process CPU clock (clock_gettime of the clock clock_getcpuclockid(3)
// names). Its user+system times (/proc/<pid>/stat, what process_cpu_seconds_total reports)
// count in clock ticks of 10 ms, coarser than a short window of a controller at rest. Where
// the clock cannot be read, the ticks.
func procCPUSeconds(fs procfs.FS, pid int) float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(^pid<<3|cpuClockSched), &ts); err == nil {
		return float64(ts.Nano()) / 1e9
	}
	if proc, err := fs.Proc(pid); err == nil {
		if st, err := proc.Stat(); err == nil {
			return st.CPUTime()
		}
	}
	return 0
}

// cpuClockSched selects, in a process CPU clock's id, the scheduler's exact runtime (Linux's
// CPUCLOCK_SCHED; the id is the pid's complement shifted by 3, as glibc's
// clock_getcpuclockid makes it).
const cpuClockSched = 2

// since returns the controller's CPU seconds and the machine's busy percentage from m0 to m.
func (m cpuMark) since(m0 cpuMark) (procS, busyPct float64) {
	if m.total > m0.total {
		// At most 100: busy and total are sums of the same float counters, and a machine busy
		// throughout gives 100 plus a rounding error.
		busyPct = min(100, 100*(m.busy-m0.busy)/(m.total-m0.total))
	}
	return m.proc - m0.proc, busyPct
}
