// Command bench runs the benchmarks behind `make bench` (see internal/bench and
// docs/benchmarks.md) and writes _out/bench/report.md and report.json, then
// copies the Markdown to docs/benchmarks.md.
//
//	bench [flags]              run the benchmark
//	bench controller [flags]   the controller process the benchmark measures
//	bench floor [flags]        the capacity step's floor: watches read into io.Discard
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/openshift/hub-node-metadata/internal/bench"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "render" {
		// bench render report.json [out.md]: re-render a saved report.
		if err := render(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench render:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "floor" {
		if err := bench.FloorMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench floor:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "controller" {
		if err := bench.ControllerMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench controller:", err)
			os.Exit(1)
		}
		return
	}
	ctrl.SetLogger(logr.Discard())
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type ints []int

func (v *ints) String() string {
	var s []string
	for _, i := range *v {
		s = append(s, strconv.Itoa(i))
	}
	return strings.Join(s, ",")
}

func (v *ints) Set(s string) error {
	*v = nil
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		i, err := strconv.Atoi(f)
		if err != nil {
			return err
		}
		*v = append(*v, i)
	}
	return nil
}

func run() error {
	cfg := bench.DefaultConfig()
	gs, gn, cr := ints(cfg.GrowthSpokes), ints(cfg.GrowthNodes), ints(cfg.CapacityRates)
	flag.IntVar(&cfg.Spokes, "spokes", cfg.Spokes, "spokes of the main fleet")
	flag.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "Nodes (pool replicas) per spoke of the main fleet")
	flag.DurationVar(&cfg.Idle, "idle", cfg.Idle, "window over which an in-sync fleet's requests are counted (the at-rest goals need at least 10m)")
	flag.DurationVar(&cfg.IdleResync, "idle-resync", cfg.IdleResync, "--resync-period of the at-rest step's controller, printed as an override, so that the window spans 3 resync periods (0: the shipped 10m)")
	flag.IntVar(&cfg.ReactionSamples, "reaction-samples", cfg.ReactionSamples, "samples per reaction case")
	flag.IntVar(&cfg.ReactionConcurrency, "reaction-concurrency", cfg.ReactionConcurrency, "reaction samples in flight")
	flag.DurationVar(&cfg.ReactionHeartbeat, "reaction-heartbeat", cfg.ReactionHeartbeat, "how often each Node of the reaction step's spokes posts a real worker's status while the samples run (0: never)")
	flag.DurationVar(&cfg.ReactionFastHeartbeat, "reaction-fast-heartbeat", cfg.ReactionFastHeartbeat, "how often the Nodes of the first -reaction-fast-spokes post instead")
	flag.IntVar(&cfg.ReactionFastSpokes, "reaction-fast-spokes", cfg.ReactionFastSpokes, "reaction spokes whose Nodes post every -reaction-fast-heartbeat")
	flag.Float64Var(&cfg.DegradedFraction, "degraded-fraction", cfg.DegradedFraction, "fraction of spokes black-holed / delayed in the isolation step")
	flag.DurationVar(&cfg.Delay, "delay", cfg.Delay, "answer delay of the slow spokes")
	flag.Var(&gs, "growth-spokes", "subsets of the main fleet measured again (comma-separated spoke counts)")
	flag.Var(&gn, "growth-nodes", "Nodes per spoke of the Nodes dimension, grown in place (comma-separated)")
	flag.IntVar(&cfg.GrowthNodesSpokes, "growth-nodes-spokes", cfg.GrowthNodesSpokes, "spokes of the Nodes dimension (0 skips it)")
	flag.IntVar(&cfg.SimClusters, "sim-clusters", cfg.SimClusters, "simulated ClusterDeployments (0 skips)")
	flag.IntVar(&cfg.SimRealSpokes, "sim-real-spokes", cfg.SimRealSpokes, "real spokes the simulated clusters share")
	flag.IntVar(&cfg.SimNodes, "sim-nodes", cfg.SimNodes, "Machines and Nodes per simulated cluster")
	flag.IntVar(&cfg.SimLargeRealSpokes, "sim-large-real-spokes", cfg.SimLargeRealSpokes, "after the restarts, move the simulated clusters onto this many real spokes (larger caches: sim-clusters/N Nodes each) and check they all sync under the Deployment's memory limit (0 skips)")
	flag.Float64Var(&cfg.SimRSSCapMiB, "sim-rss-cap", cfg.SimRSSCapMiB, "stop the simulation when the controller's RSS passes this many MiB (0: no cap)")
	flag.DurationVar(&cfg.SimTimeout, "sim-timeout", cfg.SimTimeout, fmt.Sprintf("how long to wait for every simulated cluster to be InSync in an adoption (a wait ends sooner once no cluster has got there for %s)", bench.StallAfter))
	flag.DurationVar(&cfg.RestartTimeout, "restart-timeout", cfg.RestartTimeout, "how long to wait for every simulated cluster to be InSync after a restart or a failover (reported as it stood then)")
	flag.DurationVar(&cfg.SimSteady, "sim-steady", cfg.SimSteady, "window of the controller's CPU once every simulated cluster is InSync (0 skips it)")
	flag.DurationVar(&cfg.SimHeartbeat, "sim-heartbeat", cfg.SimHeartbeat, "how often each Node posts a real worker's status during that window, as a kubelet does at least (0: never)")
	flag.IntVar(&cfg.MaxRealSpokes, "max-real-spokes", cfg.MaxRealSpokes, "grow the fleet to this many real spokes and check all InSync (0: skip)")
	flag.IntVar(&cfg.MaxRealNodes, "max-real-nodes", cfg.MaxRealNodes, "Nodes per spoke added by -max-real-spokes")
	flag.IntVar(&cfg.CapacityClusters, "capacity-clusters", cfg.CapacityClusters, "connections of the capacity step, each a cluster on the event server (0 skips it)")
	flag.IntVar(&cfg.CapacityNodes, "capacity-nodes", cfg.CapacityNodes, "real-sized Nodes (and Machines) of each capacity cluster")
	flag.Var(&cr, "capacity-rates", "events a second of the capacity step, rising (comma-separated)")
	flag.DurationVar(&cfg.CapacityWindow, "capacity-window", cfg.CapacityWindow, "window of each capacity rate")
	flag.StringVar(&cfg.Only, "only", "", "run the fleet's set-up and this step alone: capacity")
	flag.Float64Var(&cfg.HubQPS, "hub-qps", cfg.HubQPS, "controller's hub client QPS (default: hub-controller's; another value is printed as an override)")
	flag.IntVar(&cfg.HubBurst, "hub-burst", cfg.HubBurst, "controller's hub client burst")
	flag.Float64Var(&cfg.SpokeQPS, "spoke-qps", cfg.SpokeQPS, "controller's per-spoke QPS (default: hub-controller's)")
	flag.IntVar(&cfg.SpokeBurst, "spoke-burst", cfg.SpokeBurst, "controller's per-spoke burst")
	env := flag.String("controller-env", "", "extra KEY=VALUE,... environment of every controller process, printed as overrides (e.g. HTTP2_READ_IDLE_TIMEOUT_SECONDS=5)")
	flags := flag.String("controller-flags", "", "extra --flag=value,... of every controller process, printed as overrides (e.g. --spoke-max-concurrent-connects=128)")
	flag.StringVar(&cfg.GOMEMLIMIT, "gomemlimit", cfg.GOMEMLIMIT, "controller's GOMEMLIMIT (default: config/hub's Deployment memory limit; off: unset)")
	flag.DurationVar(&cfg.MemorySettle, "memory-settle", cfg.MemorySettle, "how long a controller runs on once every cluster is InSync before its memory is measured")
	flag.DurationVar(&cfg.ConvergeTimeout, "converge-timeout", cfg.ConvergeTimeout, "bound of every convergence wait")
	out := flag.String("out", "_out/bench", "report folder")
	docs := flag.String("docs", "docs/benchmarks.md", "copy the Markdown report here (empty: don't)")
	command := flag.String("command", "", "the command to print in the report (default: this command line)")
	verbose := flag.Bool("v", false, "show the API servers' output")
	// On 2 cores a full run at real size takes two hours or more (docs/benchmark-notes.md,
	// "A full run at real size, cut short"): the bound leaves it room. A run past the bound
	// stops; its report says so and is not copied to -docs.
	timeout := flag.Duration("timeout", 4*time.Hour, "bound of the whole run")
	flag.Parse()
	cfg.GrowthSpokes, cfg.GrowthNodes, cfg.CapacityRates = gs, gn, cr
	var err error
	if cfg.ControllerEnv, err = splitList(*env, "-controller-env", "KEY=VALUE", func(e string) bool { return strings.Contains(e, "=") }); err != nil {
		return err
	}
	if cfg.ControllerFlags, err = splitList(*flags, "-controller-flags", "--flag=value", func(f string) bool {
		return strings.HasPrefix(f, "--") && strings.Contains(f, "=")
	}); err != nil {
		return err
	}

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.ControllerCommand = []string{exe, "controller"}
	cfg.OutDir = *out
	cfg.Log = os.Stderr
	if *verbose {
		cfg.FleetLog = os.Stderr
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()

	rep, runErr := bench.Run(ctx, cfg)
	if rep == nil {
		return runErr
	}
	rep.Command = *command
	if rep.Command == "" {
		rep.Command = "go run ./hack/bench " + strings.Join(os.Args[1:], " ")
	}
	if runErr != nil {
		rep.Notes = append(rep.Notes, "the run stopped early: "+runErr.Error())
	}
	md := rep.Markdown()
	js, err := rep.JSON()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "report.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println(md)
	fmt.Printf("wrote %s and %s\n", filepath.Join(*out, "report.md"), filepath.Join(*out, "report.json"))
	if *docs != "" && cfg.Only != "" {
		fmt.Printf("not copied to %s: -only %s ran one step\n", *docs, cfg.Only)
	} else if *docs != "" && runErr == nil {
		if err := os.WriteFile(*docs, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Printf("copied to %s\n", *docs)
	}
	return runErr
}

func render(args []string) error {
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	rep := &bench.Report{}
	if err := json.Unmarshal(data, rep); err != nil {
		return err
	}
	rep.Judge()
	md := rep.Markdown()
	if len(args) > 1 {
		return os.WriteFile(args[1], []byte(md), 0o644)
	}
	fmt.Print(md)
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items; each item must satisfy ok.
func splitList(v, flagName, form string, ok func(string) bool) ([]string, error) {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		if !ok(item) {
			return nil, fmt.Errorf("%s: %q is not %s", flagName, item, form)
		}
		out = append(out, item)
	}
	return out, nil
}
