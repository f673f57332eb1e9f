package int_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

var kubectlBin, oldestKubectlBin builtOnce

// oldestKubectl is the minor of the oldest kubectl the recipe is run with:
// SREs run the kubectl of their own OpenShift minor.
const oldestKubectl = "1.29"

// kubectlBinary is the real kubectl, built once from the module proxy by
// hack/kubectl.sh (or KUBECTL, which the Makefile sets to the same).
func kubectlBinary(t *testing.T) string {
	return kubectlBin.get(t, func() (string, error) {
		if p := os.Getenv("KUBECTL"); p != "" {
			return p, nil
		}
		return localfleet.BuildTool("../hack/kubectl.sh")
	})
}

// oldestKubectlBinary is kubectl 1.29, as kubectlBinary (KUBECTL_1_29).
func oldestKubectlBinary(t *testing.T) string {
	return oldestKubectlBin.get(t, func() (string, error) {
		if p := os.Getenv("KUBECTL_" + strings.ReplaceAll(oldestKubectl, ".", "_")); p != "" {
			return p, nil
		}
		return localfleet.BuildTool("../hack/kubectl.sh", oldestKubectl)
	})
}

// waitRecipe is README's `kubectl wait` recipe, as written there.
func waitRecipe(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- recipe: wait-for-pool")
	if !ok {
		t.Fatal("README.md has no wait-for-pool recipe")
	}
	_, body, ok := strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatal("README.md's wait-for-pool recipe is not a ```sh block")
	}
	body, _, ok = strings.Cut(body, "```")
	if !ok {
		t.Fatal("README.md's wait-for-pool recipe does not end")
	}
	return body
}

// recipeRun is README's recipe running in bash with the real kubectl.
type recipeRun struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan error
	start  time.Time
}

func startRecipe(t *testing.T, kubectl, kubeconfig, ns, pool string) *recipeRun {
	t.Helper()
	r := &recipeRun{done: make(chan error, 1), start: time.Now()}
	r.cmd = exec.Command("bash", "-c", waitRecipe(t))
	r.cmd.Env = append(os.Environ(), "ns="+ns, "pool="+pool, "KUBECONFIG="+kubeconfig,
		"PATH="+filepath.Dir(kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	r.cmd.Stdout = &r.stderr
	r.cmd.Stderr = &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() { _ = r.cmd.Process.Kill() })
	return r
}

// result waits for the recipe to end and returns its error and how long it ran.
func (r *recipeRun) result(t *testing.T, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	select {
	case err := <-r.done:
		return time.Since(r.start), err
	case <-time.After(timeout):
		t.Fatalf("the recipe still runs after %s; output:\n%s", timeout, r.stderr.String())
		return 0, nil
	}
}

// TestKubectlWaitRecipe runs README's recipe with the real kubectl wait
// against the shipped binary:
//   - on a pool edited while the controller is down, it waits (the old
//     Ready=True does not answer) and returns once the controller is back
//     and every Node holds the edit, where a bare kubectl wait returns at
//     once;
//   - on a refused edit, it fails within seconds, naming the reason;
//
// and checks the conditions and the Ready printer column on the way.
func TestKubectlWaitRecipe(t *testing.T) {
	t.Parallel()
	kubectl := kubectlBinary(t)
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 2)
	kc := controllerKubeconfig(t, ctx, f)
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := localfleet.WriteKubeconfig(admin, "hub", f.Hub.Config); err != nil {
		t.Fatal(err)
	}
	ns, pool := s.Name, s.Name+"-infra"
	run := func(args ...string) (string, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", admin, "-n", ns}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	ctrl := startBinary(t, kc)
	waitInSync(t, ctx, f, s, time.Minute)

	// Conditions of a pool in sync, and the Ready column.
	mps, err := poolSync(ctx, f.Hub.Client, s, "infra")
	if err != nil {
		t.Fatal(err)
	}
	checkConditions(t, mps, map[string]metav1.ConditionStatus{
		v1alpha1.ConditionReady: metav1.ConditionTrue, v1alpha1.ConditionProgressing: metav1.ConditionFalse, v1alpha1.ConditionDegraded: metav1.ConditionFalse})
	out, err := run("get", "machinepoolsyncs")
	if err != nil {
		t.Fatalf("kubectl get machinepoolsyncs: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[0], "READY") || !strings.Contains(lines[1], "True") {
		t.Errorf("kubectl get machinepoolsyncs: want a READY column saying True:\n%s", out)
	}
	t.Logf("kubectl get machinepoolsyncs:\n%s", out)

	// An edit while the controller is down.
	kill(t, ctrl)
	mp, err := s.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/edit"] = "1" })
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run("wait", "machinepoolsync/"+pool, "--for=condition=Ready", "--timeout=5s"); err != nil {
		t.Errorf("a bare kubectl wait for Ready should return at once on the old Ready=True (why the recipe exists): %v\n%s", err, out)
	}
	// A pool made while the controller is down has no MachinePoolSync yet.
	gpu := s.Name + "-gpu"
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "gpu").WithReplicas(1).
		WithLabels(map[string]string{"example.com/gpu": "1"})); err != nil {
		t.Fatal(err)
	}
	// The recipe waits for both, with the newest kubectl and the oldest
	// supported (1.29 has no --for=create).
	kubectls := map[string]string{"newest": kubectl, oldestKubectl: oldestKubectlBinary(t)}
	recipes := map[string]*recipeRun{}
	for version, bin := range kubectls {
		for _, p := range []string{pool, gpu} {
			recipes["kubectl "+version+" for "+p] = startRecipe(t, bin, admin, ns, p)
		}
	}
	const down = 3 * time.Second
	time.Sleep(down)
	for name, recipe := range recipes {
		select {
		case err := <-recipe.done:
			t.Fatalf("the recipe (%s) returned (%v) while the controller was down: an old Ready, or a missing MachinePoolSync, answered for generation %d\n%s", name, err, mp.Generation, recipe.stderr.String())
		default:
		}
	}
	startBinary(t, kc)
	for name, recipe := range recipes {
		took, err := recipe.result(t, time.Minute)
		if err != nil {
			t.Fatalf("the recipe (%s) failed on an edit that was delivered: %v\n%s", name, err, recipe.stderr.String())
		}
		t.Logf("the recipe (%s) returned %s after it started (the controller was down for %s of it)", name, took.Round(time.Millisecond), down)
	}
	if !nodesHold(ctx, s, "infra", hasLabel("example.com/edit", "1")) {
		t.Error("the recipe returned before every Node held the edit")
	}
	mps, err = poolSync(ctx, f.Hub.Client, s, "infra")
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(mps.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.ObservedGeneration != mp.Generation {
		t.Errorf("Ready after the recipe: %+v, want observedGeneration %d", c, mp.Generation)
	}
	if gpuSync, err := poolSync(ctx, f.Hub.Client, s, "gpu"); err != nil || !meta.IsStatusConditionTrue(gpuSync.Status.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("the new pool after the recipe: %v, %+v; want Ready", err, gpuSync)
	}

	// A refused edit: the recipe fails at once, naming the reason.
	if _, err := s.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["kubernetes.io/hostname"] = "pinned" }); err != nil {
		t.Fatal(err)
	}
	for version, bin := range kubectls {
		recipe := startRecipe(t, bin, admin, ns, pool)
		took, err := recipe.result(t, 30*time.Second)
		if err == nil || !strings.Contains(recipe.stderr.String(), "ReservedKey") || took > 10*time.Second {
			t.Errorf("the recipe (kubectl %s) on a refused pool: %v after %s, output %q; want a failure naming ReservedKey within seconds", version, err, took, recipe.stderr.String())
		}
		t.Logf("the recipe (kubectl %s) failed %s after a refused edit: %s", version, took.Round(time.Millisecond), strings.TrimSpace(recipe.stderr.String()))
	}
	mps, err = poolSync(ctx, f.Hub.Client, s, "infra")
	if err != nil {
		t.Fatal(err)
	}
	checkConditions(t, mps, map[string]metav1.ConditionStatus{
		v1alpha1.ConditionReady: metav1.ConditionFalse, v1alpha1.ConditionProgressing: metav1.ConditionFalse, v1alpha1.ConditionDegraded: metav1.ConditionTrue})
	if c := meta.FindStatusCondition(mps.Status.Conditions, v1alpha1.ConditionDegraded); c == nil || c.Reason != "ReservedKey" {
		t.Errorf("Degraded of a refused pool: %+v, want reason ReservedKey", c)
	}
}

func checkConditions(t *testing.T, mps *v1alpha1.MachinePoolSync, want map[string]metav1.ConditionStatus) {
	t.Helper()
	for typ, status := range want {
		c := meta.FindStatusCondition(mps.Status.Conditions, typ)
		switch {
		case c == nil:
			t.Errorf("%s: no %s condition in %+v", mps.Name, typ, mps.Status.Conditions)
		case c.Status != status || c.ObservedGeneration != mps.Status.ObservedGeneration || c.Reason == "" || c.LastTransitionTime.IsZero():
			t.Errorf("%s: %s = %+v, want status %s, observedGeneration %d, a reason and a transition time", mps.Name, typ, *c, status, mps.Status.ObservedGeneration)
		}
	}
	if t.Failed() {
		t.Logf("status: %s", fmt.Sprint(mps.Status))
	}
}
