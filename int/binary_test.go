package int_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	gosync "sync"
	"syscall"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// slowFlags make the binary write one object at a time at 5 requests/s per
// spoke, so that a kill lands in the middle of a rollout.
var slowFlags = []string{"--writes-per-cluster", "1", "--spoke-qps", "5", "--spoke-burst", "1"}

// builtOnce is a binary built once per test process.
type builtOnce struct {
	once gosync.Once
	path string
	err  error
}

func (b *builtOnce) get(t *testing.T, build func() (string, error)) string {
	t.Helper()
	b.once.Do(func() { b.path, b.err = build() })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

var controllerBin builtOnce

// goBuild builds pkg into out as `make build` builds the shipped binary (the
// Makefile's GOBUILD): without cgo (a static binary; the pure-Go resolver).
func goBuild(out, pkg string) ([]byte, error) {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd.CombinedOutput()
}

// controllerBinary builds cmd/hub-controller once per test process, as it
// ships (goBuild; TestBenchPipeline builds hack/bench so too, and the two
// share their packages in the build cache), or returns
// $HUB_NODE_METADATA_BINARY: the binary `make build` just built, which
// `make test-int` passes so that it is not linked twice.
func controllerBinary(t *testing.T) string {
	return controllerBin.get(t, func() (string, error) {
		if path := os.Getenv("HUB_NODE_METADATA_BINARY"); path != "" {
			if _, err := os.Stat(path); err != nil {
				return "", fmt.Errorf("HUB_NODE_METADATA_BINARY: %w", err)
			}
			return path, nil
		}
		dir, err := os.MkdirTemp("", "hub-controller-bin-")
		if err != nil {
			return "", err
		}
		path := filepath.Join(dir, "hub-controller")
		if out, err := goBuild(path, "../cmd/hub-controller"); err != nil {
			return "", fmt.Errorf("go build: %w\n%s", err, out)
		}
		return path, nil
	})
}

// controllerKubeconfig writes a kubeconfig for the controller's identity
// (impersonating its ServiceAccount when config/hub's RBAC is installed).
func controllerKubeconfig(t *testing.T, ctx context.Context, f *localfleet.Fleet) string {
	t.Helper()
	cfg := controllerConfig(t, ctx, f)
	path := filepath.Join(t.TempDir(), "controller.kubeconfig")
	if err := localfleet.WriteKubeconfig(path, "hub", cfg); err != nil {
		t.Fatal(err)
	}
	return path
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := localfleet.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// controllerProcess is the hub-controller binary running as a process.
type controllerProcess struct {
	cmd     *exec.Cmd
	log     *bytes.Buffer
	mu      *gosync.Mutex
	metrics string
}

func (p *controllerProcess) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

type lockedWriter struct {
	mu *gosync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// startBinary runs `hub-controller run` with the given extra flags; the
// process is killed at cleanup.
func startBinary(t *testing.T, kubeconfig string, extra ...string) *controllerProcess {
	t.Helper()
	port := freePort(t)
	args := append([]string{"run", "--kubeconfig", kubeconfig,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--health-probe-bind-address", "0",
		"--resync-period", "1h", "--spoke-probe-interval", "1s", "--spoke-secret-recheck", "1s"}, extra...)
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--shard-count") }) {
		args = append(args, shardFlags(t)...)
	}
	p := &controllerProcess{log: &bytes.Buffer{}, mu: &gosync.Mutex{}, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
	p.cmd = exec.Command(controllerBinary(t), args...)
	p.cmd.Stdout = lockedWriter{p.mu, p.log}
	p.cmd.Stderr = lockedWriter{p.mu, p.log}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_, _ = p.cmd.Process.Wait()
		if t.Failed() {
			t.Logf("controller log:\n%s", tail(p.Logs(), 60))
		}
	})
	return p
}

// signal sends the process sig, and stops the test if it cannot.
func (p *controllerProcess) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// kill SIGKILLs the process and waits for it to go.
func kill(t *testing.T, p *controllerProcess) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	_, _ = p.cmd.Process.Wait()
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// scrapeClient gives up on a replica that does not answer (one stopped
// with SIGSTOP, say).
var scrapeClient = &http.Client{Timeout: 5 * time.Second}

func (p *controllerProcess) scrape() (string, error) {
	resp, err := scrapeClient.Get(p.metrics)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return b.String(), err
}

// shardFlags confine the binary, `run` or `drift`, to the test's shard of the
// shared hub; none for a test on a hub of its own.
func shardFlags(t *testing.T) []string {
	if so := shardOptions(t); so.ShardCount > 0 {
		return []string{"--shard-count", fmt.Sprint(so.ShardCount), "--shard-index", fmt.Sprint(so.ShardIndex)}
	}
	return nil
}

// driftRows runs `hub-controller drift -o json` against the fleet's hub, on
// the test's clusters.
func driftRows(t *testing.T, ctx context.Context, f *localfleet.Fleet) []fleet.DriftRow {
	t.Helper()
	args := append([]string{"drift", "--kubeconfig", f.Hub.KubeconfigPath, "-o", "json"}, shardFlags(t)...)
	out, err := exec.CommandContext(ctx, controllerBinary(t), args...).Output()
	if err != nil {
		t.Fatalf("drift: %v", err)
	}
	var rows []fleet.DriftRow
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("drift -o json: %v\n%s", err, out)
	}
	return rows
}

func TestDriftCommand(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 2)
	for _, s := range f.Spokes() {
		addInfraPool(t, ctx, s, 2)
	}
	s1 := f.Spokes()[0]
	if _, err := s1.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/new"] = "1" }); err != nil {
		t.Fatal(err)
	}
	rows := driftRows(t, ctx, f)
	if len(rows) != 2 {
		t.Fatalf("want 2 rows, got %+v", rows)
	}
	for _, r := range rows {
		if r.Cluster == s1.Key().String() {
			// Fresh objects carry no ownership record: everything is "adopt" plus the new label.
			if r.State != "Drifted" || r.Machines != 2 || r.Nodes != 2 || r.DriftedNodes != 2 || r.DriftedMachines != 2 {
				t.Errorf("drifted cluster row: %+v", r)
			}
			if !strings.Contains(strings.Join(r.Changes, ";"), "add label example.com/new=1") {
				t.Errorf("changes do not name the new label: %v", r.Changes)
			}
		}
	}
	table, err := exec.CommandContext(ctx, controllerBinary(t), append([]string{"drift", "--kubeconfig", f.Hub.KubeconfigPath}, shardFlags(t)...)...).Output()
	if err != nil || !strings.Contains(string(table), "CLUSTER") || !strings.Contains(string(table), "Drifted") {
		t.Errorf("drift table: %v\n%s", err, table)
	}
	// Read-only: the spokes saw no writes.
	for _, s := range f.Spokes() {
		for _, e := range readAudit(t, s.AuditLogPath) {
			if e.Verb != "get" && e.Verb != "list" && e.Verb != "watch" {
				t.Errorf("drift report sent %s %s", e.Verb, e.RequestURI)
			}
		}
	}
	v, err := exec.CommandContext(ctx, controllerBinary(t), "version").Output()
	if err != nil || !strings.HasPrefix(string(v), "hub-controller ") {
		t.Errorf("version: %v %q", err, v)
	}
}

func TestBinarySurvivesSIGKILLMidRollout(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 20)
	kc := controllerKubeconfig(t, ctx, f)
	p := startBinary(t, kc, slowFlags...)
	r := beforeRollout(t, ctx, f, s, 20)
	r.interrupt(t, ctx, "killed", func() { kill(t, p) })
	startBinary(t, kc)
	r.completes(t, ctx, "rollout completes after restart")
	r.checkPatches(t)
}
