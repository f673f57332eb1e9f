package bench

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	hub "github.com/openshift/hub-node-metadata/config/hub"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// The benchmark's controller gets what config/hub's manager container gets: its args (less
// the subcommand and bind addresses) and its environment, read from the rendered base.
func TestDeploymentArgsAndEnvComeFromConfigHub(t *testing.T) {
	rendered, err := hub.Render(filepath.Join("..", "..", "config", "hub", "base"))
	if err != nil {
		t.Fatal(err)
	}
	d, c, err := managerContainer(rendered)
	if err != nil {
		t.Fatal(err)
	}
	args, err := deploymentArgs(rendered)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--leader-elect") || !slices.Contains(args, "--leader-elect-namespace="+d.Namespace) {
		t.Errorf("args %q lack leader election in %s", args, d.Namespace)
	}
	for _, a := range args {
		if a == "run" || strings.Contains(a, "bind-address") {
			t.Errorf("args %q keep %q", args, a)
		}
	}
	if _, err := deploymentEnv(rendered); err != nil {
		t.Errorf("config/hub's own environment: %v", err)
	}

	// The environment comes through as the container has it, in order, KEY=VALUE; a variable
	// the benchmark cannot reproduce is refused, not dropped.
	withEnv := func(env ...corev1.EnvVar) []byte {
		t.Helper()
		dd := d.DeepCopy()
		for i := range dd.Spec.Template.Spec.Containers {
			if dd.Spec.Template.Spec.Containers[i].Name == c.Name {
				dd.Spec.Template.Spec.Containers[i].Env = env
			}
		}
		doc, err := yaml.Marshal(dd)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	env, err := deploymentEnv(withEnv(corev1.EnvVar{Name: "GOGC", Value: "75"}, corev1.EnvVar{Name: "EXTRA", Value: "a=b"}, corev1.EnvVar{Name: "EMPTY"}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"GOGC=75", "EXTRA=a=b", "EMPTY="}, env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if _, err := deploymentEnv(withEnv(corev1.EnvVar{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}})); err == nil || !strings.Contains(err.Error(), "FROM_SECRET") {
		t.Errorf("deploymentEnv with a valueFrom variable: %v, want a refusal naming it", err)
	}
}

// The resync period the CPU row judges by is the one the controller's own flag set reads from
// the Deployment's args.
func TestShippedResync(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--leader-elect"}, fleet.DefaultResyncPeriod},
		{[]string{"--leader-elect", "--resync-period=3m"}, 3 * time.Minute},
	} {
		if got, err := shippedResync(c.args); err != nil || got != c.want {
			t.Errorf("shippedResync(%q) = %s, %v; want %s", c.args, got, err, c.want)
		}
	}
	if _, err := shippedResync([]string{"--no-such-flag"}); err == nil {
		t.Error("shippedResync took a flag the binary does not have")
	}
}

// A process's CPU time is read to the nanosecond, not in the 10 ms clock ticks of
// /proc/<pid>/stat: a few ms of work show, and not as a whole number of ticks.
func TestProcCPUSecondsIsFinerThanATick(t *testing.T) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Skip("no /proc:", err)
	}
	pid := os.Getpid()
	before := procCPUSeconds(fs, pid)
	var x uint64
	for start := time.Now(); time.Since(start) < 3*time.Millisecond; {
		x++
	}
	after := procCPUSeconds(fs, pid)
	ticks := func(s float64) bool { return math.Mod(math.Round(s*1e9), 1e7) == 0 }
	if got := after - before; got <= 0 || got > 1 || ticks(before) && ticks(after) {
		t.Errorf("3 ms of work read as %.6f s of CPU (from %.9f to %.9f, %d loops)", got, before, after, x)
	}
}

// The wave's objective is the one config/hub's PrometheusRule alerts on, and rules that
// disagree on it are refused rather than one of them read.
func TestSLOObjectiveComesFromConfigHub(t *testing.T) {
	rendered, err := hub.Render(filepath.Join("..", "..", "config", "hub", "base"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := sloObjective(rendered)
	if err != nil || got != 10 {
		t.Fatalf("sloObjective = %v, %v; want config/hub's 10 s", got, err)
	}
	split := strings.Replace(string(rendered), `le="10"`, `le="30"`, 1)
	if _, err := sloObjective([]byte(split)); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("rules that differ in le: err = %v", err)
	}
	if _, err := sloObjective([]byte("kind: ConfigMap\n")); err == nil {
		t.Error("no PrometheusRule: no error")
	}
}
