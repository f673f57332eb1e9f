// Command fleet starts a local hub and spokes (real API servers, see
// internal/localfleet) with sample MachinePools, prints how to reach them, and
// stops cleanly on Ctrl-C. With -demo it also runs the controller, changes a
// pool and shows the fleet converging.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

// controllerLog is where controller-runtime's log goes: nowhere until the
// demo names its file. The logger is set before anything logs, once (a
// later SetLogger is ignored, and without one controller-runtime prints a
// stack dump after 30 s that reads as a crash).
var controllerLog lateWriter

// lateWriter writes to w once set, and discards until then.
type lateWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lateWriter) set(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w = w
}

func (l *lateWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return len(p), nil
	}
	return l.w.Write(p)
}

func main() {
	ctrl.SetLogger(zap.New(zap.WriteTo(&controllerLog)))
	spokes := flag.Int("spokes", 3, "number of spokes")
	nodes := flag.Int("nodes", 3, "Nodes per sample pool")
	demo := flag.Bool("demo", false, "run the controller, change a pool, show convergence, then exit")
	dir := flag.String("dir", "", "working folder (default: a temporary folder removed on exit)")
	versions := flag.String("spoke-versions", "", "comma-separated Kubernetes minors the spokes run in turn, e.g. 1.29,1.33,1.37, each built if it is not (hack/controlplane.sh --all; default: every spoke the newest)")
	ifBuilt := flag.String("spoke-versions-if-built", "", "as -spoke-versions, but only the minors already built, saying how to build the others: a first run starts without waiting for them")
	flag.Parse()
	if *versions == "" && *ifBuilt != "" {
		*versions = builtVersions(strings.Split(*ifBuilt, ","))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := localfleet.Options{Spokes: *spokes, Dir: *dir, Audit: true}
	if *versions != "" {
		opts.SpokeVersions = strings.Split(*versions, ",")
		opts.VersionAssets = map[string]string{}
		for _, v := range opts.SpokeVersions {
			if os.Getenv(localfleet.VersionAssetsEnv(v)) != "" {
				continue
			}
			assets, err := localfleet.BuildTool("hack/controlplane.sh", v)
			if err != nil {
				fmt.Fprintln(os.Stderr, "error:", err)
				os.Exit(1)
			}
			opts.VersionAssets[v] = assets
		}
	}
	if err := run(ctx, opts, *nodes, *demo); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts localfleet.Options, nodes int, demo bool) error {
	start := time.Now()
	fmt.Printf("starting a local hub and %d spokes (real kube-apiservers over one etcd)...\n", opts.Spokes)
	f, err := localfleet.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("stopping the fleet...")
		if err := f.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop:", err)
		}
	}()
	for _, s := range f.Spokes() {
		if err := addSamplePools(ctx, s, nodes); err != nil {
			return err
		}
	}
	fmt.Printf("fleet up in %s\n\n", time.Since(start).Round(time.Millisecond))
	fmt.Printf("hub kubeconfig:   %s\n", f.Hub.KubeconfigPath)
	fmt.Printf("  try: kubectl --kubeconfig %s get clusterdeployments,machinepools -A\n", f.Hub.KubeconfigPath)
	for _, s := range f.Spokes() {
		path := filepath.Join(f.Dir(), s.Name+".kubeconfig")
		if err := localfleet.WriteKubeconfig(path, s.Name, s.AdminConfig); err != nil {
			return err
		}
		fmt.Printf("spoke %-10s %s Kubernetes %s (admin kubeconfig %s)\n", s.Name, s.URL(), s.Version, path)
	}
	if demo {
		return runDemo(ctx, f)
	}
	fmt.Println("\nCtrl-C stops the fleet.")
	<-ctx.Done()
	return nil
}

// addSamplePools gives a spoke the pools an OSD cluster typically has: an
// infra pool with its role label and taint, and a workload pool.
func addSamplePools(ctx context.Context, s *localfleet.Spoke, nodes int) error {
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "infra").
		WithReplicas(nodes).
		WithLabels(map[string]string{"node-role.kubernetes.io/infra": ""}).
		WithTaints(localfleet.Taint("node-role.kubernetes.io/infra", "reserved", corev1.TaintEffectNoSchedule))); err != nil {
		return err
	}
	_, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "workers").
		WithReplicas(nodes).
		WithLabels(map[string]string{"example.com/team": "payments"}).
		WithMachineLabels(map[string]string{"example.com/cost-center": "1234"}))
	return err
}

// builtVersions are the minors of want whose control plane is built, joined
// with commas ("" if none but the newest, which every spoke then runs). It
// says which are not and how to build them.
func builtVersions(want []string) string {
	var built, missing []string
	for _, v := range want {
		if exec.Command("hack/controlplane.sh", "--cached", v).Run() == nil {
			built = append(built, v)
		} else {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		fmt.Printf("Kubernetes %s: not built yet, so the spokes run %s; `make controlplane` builds the others (a few minutes each on 2 cores) and the next run shows them all\n",
			strings.Join(missing, ", "), strings.Join(built, ", "))
	}
	if len(built) <= 1 {
		return ""
	}
	return strings.Join(built, ",")
}
