package bench

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	hub "github.com/openshift/hub-node-metadata/config/hub"
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
	env, err := deploymentEnv(rendered)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range c.Env {
		want = append(want, e.Name+"="+e.Value)
	}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}

	// A variable the benchmark cannot reproduce is refused, not dropped.
	c.Env = append(c.Env, corev1.EnvVar{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}})
	doc, err := yaml.Marshal(&appsv1.Deployment{TypeMeta: d.TypeMeta, ObjectMeta: d.ObjectMeta, Spec: d.Spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deploymentEnv(doc); err == nil || !strings.Contains(err.Error(), "FROM_SECRET") {
		t.Errorf("deploymentEnv with a valueFrom variable: %v, want a refusal naming it", err)
	}
}
