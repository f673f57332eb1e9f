package int_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/openshift/hub-node-metadata/config/hub"
	"github.com/openshift/hub-node-metadata/internal/metricnames"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// hubDir is config/hub, relative to this package.
var hubDir = filepath.Join("..", "config", "hub")

// wantClusterRole is everything the controller may do cluster-wide on the hub,
// as group/resource: verbs. It reads Hive's objects and never writes them,
// gets (only) the admin kubeconfig Secret a ClusterDeployment names, owns its
// MachinePoolSyncs and records Events. The ClusterRole must grant exactly this.
var wantClusterRole = map[string][]string{
	"hive.openshift.io/clusterdeployments":                 {"get", "list", "watch"},
	"hive.openshift.io/machinepools":                       {"get", "list", "watch"},
	"/secrets":                                             {"get", "list", "watch"}, // list/watch: metadata-only watch
	"hubnodemetadata.openshift.io/machinepoolsyncs":        {"create", "get", "list", "watch"},
	"hubnodemetadata.openshift.io/machinepoolsyncs/status": {"get", "patch", "update"},
	"/events":              {"create", "patch"},
	"events.k8s.io/events": {"create", "patch"},
}

// wantLeaderElectionRole is what the controller may do in its own namespace.
var wantLeaderElectionRole = map[string][]string{
	"coordination.k8s.io/leases": {"create", "get", "update"},
}

// TestManifests renders config/hub (the base and every overlay) with krusty
// and applies every object to a real hub API server as a server-side-apply
// dry run, so schema errors, unknown fields and Pod Security violations are
// caught by the API server itself. It also holds the RBAC to least privilege,
// the pods to the restricted profile, and the alerts and the dashboard to
// metrics the controller exports.
func TestManifests(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startOwnFleet(t, ctx, 0)

	if _, err := envtest.InstallCRDs(f.Hub.Config, envtest.CRDInstallOptions{
		Paths:              []string{filepath.Join("..", "config", "crds", "monitoring")},
		ErrorIfPathMissing: true,
		MaxTime:            time.Minute,
		PollInterval:       100 * time.Millisecond,
	}); err != nil {
		t.Fatalf("install monitoring CRDs: %v", err)
	}

	// A client that records the API server's warnings (unknown or duplicate
	// fields, Pod Security "would violate" on pod templates): any is a failure.
	warnings := &warningRecorder{}
	cfg := rest.CopyConfig(f.Hub.Config)
	cfg.WarningHandlerWithContext = warnings
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	for _, k := range hub.Kustomizations {
		t.Run(k, func(t *testing.T) {
			out, err := hub.Render(filepath.Join(hubDir, k))
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decodeObjects(out)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rendered %d objects (%d bytes)", len(objs), len(out))

			// Namespaced objects can only be dry-run into a namespace that exists.
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					if err := apply(ctx, c, o, false); err != nil {
						t.Fatalf("apply %s: %v", describe(o), err)
					}
				}
			}
			for _, o := range objs {
				warnings.reset()
				if err := apply(ctx, c, o, true); err != nil {
					t.Errorf("server-side apply (dry run) %s: %v", describe(o), err)
				}
				if w := warnings.reset(); len(w) > 0 {
					t.Errorf("server-side apply (dry run) %s: API server warnings:\n  %s", describe(o), strings.Join(w, "\n  "))
				}
			}

			checkRBAC(t, objs)
			checkDeployments(ctx, t, c, warnings, objs)
			checkMetricNames(t, objs)
		})
	}
}

// apply server-side applies o, as a dry run when dryRun.
func apply(ctx context.Context, c client.Client, o *unstructured.Unstructured, dryRun bool) error {
	opts := []client.ApplyOption{client.FieldOwner("test"), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...)
}

func checkRBAC(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var sa *corev1.ServiceAccount
	for _, o := range byKind(objs, "ServiceAccount") {
		sa = &corev1.ServiceAccount{}
		mustConvert(t, o, sa)
	}
	if sa == nil {
		t.Fatal("no ServiceAccount rendered")
	}

	var clusterRoles, roles []string
	for _, o := range byKind(objs, "ClusterRole") {
		cr := &rbacv1.ClusterRole{}
		mustConvert(t, o, cr)
		clusterRoles = append(clusterRoles, cr.Name)
		if cr.AggregationRule != nil {
			t.Errorf("ClusterRole %s: aggregation rule grants whatever other roles grant", cr.Name)
		}
		checkRules(t, "ClusterRole "+cr.Name, cr.Rules, wantClusterRole)
		for _, r := range cr.Rules {
			if slices.Contains(r.APIGroups, "hive.openshift.io") {
				for _, v := range r.Verbs {
					if !slices.Contains([]string{"get", "list", "watch"}, v) {
						t.Errorf("ClusterRole %s: write verb %q on hive.openshift.io; the controller never writes Hive's objects", cr.Name, v)
					}
				}
			}
		}
	}
	for _, o := range byKind(objs, "Role") {
		r := &rbacv1.Role{}
		mustConvert(t, o, r)
		roles = append(roles, r.Name)
		if r.Namespace != sa.Namespace {
			t.Errorf("Role %s is in namespace %q, the controller runs in %q", r.Name, r.Namespace, sa.Namespace)
		}
		checkRules(t, "Role "+r.Name, r.Rules, wantLeaderElectionRole)
	}
	if len(clusterRoles) != 1 || len(roles) != 1 {
		t.Errorf("want one ClusterRole and one Role, got ClusterRoles %v and Roles %v", clusterRoles, roles)
	}

	// Every binding binds one of those roles to the controller's ServiceAccount, and nothing else.
	wantSubject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}
	bound := map[string]bool{}
	for _, o := range byKind(objs, "ClusterRoleBinding") {
		b := &rbacv1.ClusterRoleBinding{}
		mustConvert(t, o, b)
		if b.RoleRef.Kind != "ClusterRole" || !slices.Contains(clusterRoles, b.RoleRef.Name) {
			t.Errorf("ClusterRoleBinding %s binds %s %s, not this controller's ClusterRole", b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		if d := cmp.Diff(wantSubject, b.Subjects); d != "" {
			t.Errorf("ClusterRoleBinding %s subjects (-want +got):\n%s", b.Name, d)
		}
		bound["ClusterRole/"+b.RoleRef.Name] = true
	}
	for _, o := range byKind(objs, "RoleBinding") {
		b := &rbacv1.RoleBinding{}
		mustConvert(t, o, b)
		if b.RoleRef.Kind != "Role" || !slices.Contains(roles, b.RoleRef.Name) || b.Namespace != sa.Namespace {
			t.Errorf("RoleBinding %s/%s binds %s %s, not this controller's Role in %s", b.Namespace, b.Name, b.RoleRef.Kind, b.RoleRef.Name, sa.Namespace)
		}
		if d := cmp.Diff(wantSubject, b.Subjects); d != "" {
			t.Errorf("RoleBinding %s subjects (-want +got):\n%s", b.Name, d)
		}
		bound["Role/"+b.RoleRef.Name] = true
	}
	for _, n := range clusterRoles {
		if !bound["ClusterRole/"+n] {
			t.Errorf("ClusterRole %s is bound by no ClusterRoleBinding", n)
		}
	}
	for _, n := range roles {
		if !bound["Role/"+n] {
			t.Errorf("Role %s is bound by no RoleBinding", n)
		}
	}
}

// checkRules fails unless rules grant exactly want (group/resource: verbs),
// with no wildcards, non-resource URLs or impersonation-style verbs.
func checkRules(t *testing.T, what string, rules []rbacv1.PolicyRule, want map[string][]string) {
	t.Helper()
	got := map[string][]string{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("%s: grants non-resource URLs %v", what, r.NonResourceURLs)
		}
		for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs} {
			if slices.Contains(list, rbacv1.VerbAll) {
				t.Errorf("%s: wildcard in rule %+v", what, r)
			}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				k := g + "/" + res
				got[k] = append(got[k], r.Verbs...)
			}
		}
	}
	for k, v := range got {
		slices.Sort(v)
		got[k] = slices.Compact(v)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s grants other than least privilege (-want +got):\n%s", what, d)
	}
}

// checkDeployments holds every Deployment's pods to the restricted profile,
// checks the probes and ports the controller serves, and dry-runs a Pod from
// the template in the namespace, which enforces Pod Security "restricted".
func checkDeployments(ctx context.Context, t *testing.T, c client.Client, warnings *warningRecorder, objs []*unstructured.Unstructured) {
	t.Helper()
	deployments := byKind(objs, "Deployment")
	if len(deployments) == 0 {
		t.Fatal("no Deployment rendered")
	}
	var sa string
	for _, o := range byKind(objs, "ServiceAccount") {
		sa = o.GetName()
	}
	for _, o := range deployments {
		d := &appsv1.Deployment{}
		mustConvert(t, o, d)
		name := "Deployment " + d.Name
		spec := d.Spec.Template.Spec
		if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
			t.Errorf("%s: want at least 2 replicas (one leader, one standby)", name)
		}
		if spec.ServiceAccountName != sa {
			t.Errorf("%s: serviceAccountName %q, want %q", name, spec.ServiceAccountName, sa)
		}
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("%s: uses host namespaces", name)
		}
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("%s: pod securityContext.runAsNonRoot must be true", name)
		}
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod seccompProfile must be RuntimeDefault", name)
		}
		if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
			t.Fatalf("%s: want one container and no init containers", name)
		}
		ctr := spec.Containers[0]
		sc := ctr.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s: container %s has no securityContext", name, ctr.Name)
		default:
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: allowPrivilegeEscalation must be false", name)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: readOnlyRootFilesystem must be true", name)
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: privileged", name)
			}
			if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s: capabilities must drop ALL and add none, got %+v", name, sc.Capabilities)
			}
			if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
				t.Errorf("%s: runAsUser 0", name)
			}
		}
		if !slices.Contains(ctr.Args, "--leader-elect") {
			t.Errorf("%s: args %v lack --leader-elect", name, ctr.Args)
		}
		for probe, p := range map[string]*corev1.Probe{"/healthz": ctr.LivenessProbe, "/readyz": ctr.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != probe || containerPort(ctr, p.HTTPGet.Port.String()) != 8081 {
				t.Errorf("%s: want an HTTP probe of %s on port 8081", name, probe)
			}
		}
		if containerPort(ctr, "metrics") != 8080 {
			t.Errorf("%s: want the metrics port 8080 named \"metrics\" (the Service targets it)", name)
		}
		if ctr.Resources.Requests.Cpu().IsZero() || ctr.Resources.Requests.Memory().IsZero() || ctr.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: want cpu and memory requests and a memory limit, got %+v", name, ctr.Resources)
		}

		// The namespace enforces Pod Security "restricted": a Pod from the
		// template must be admitted.
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: d.Name + "-", Namespace: d.Namespace, Labels: d.Spec.Template.Labels},
			Spec:       *spec.DeepCopy(),
		}
		warnings.reset()
		if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
			t.Errorf("%s: a Pod from its template is not admitted: %v", name, err)
		}
		if w := warnings.reset(); len(w) > 0 {
			t.Errorf("%s: a Pod from its template draws warnings:\n  %s", name, strings.Join(w, "\n  "))
		}
	}

	// The check above has teeth: the same Pod with a privileged container is refused.
	d := &appsv1.Deployment{}
	mustConvert(t, deployments[0], d)
	bad := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "privileged-", Namespace: d.Namespace},
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
	bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = new(true)
	if err := c.Create(ctx, bad, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "PodSecurity") {
		t.Errorf("a Pod allowing privilege escalation in namespace %s: want a PodSecurity refusal, got %v", d.Namespace, err)
	}
	warnings.reset()
}

func containerPort(c corev1.Container, nameOrNumber string) int32 {
	for _, p := range c.Ports {
		if p.Name == nameOrNumber || fmt.Sprint(p.ContainerPort) == nameOrNumber {
			return p.ContainerPort
		}
	}
	return 0
}

// metricRE matches the metric names an expression refers to.
var metricRE = regexp.MustCompile(`\b(hub_node_metadata_[a-z0-9_]+|leader_election_[a-z_]+)\b`)

// checkMetricNames fails when an alert or a dashboard query names a metric the
// controller does not export (a typo there is silent: the query is empty).
func checkMetricNames(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	known := exportedMetrics(t)
	// controller-runtime's leader election gauge, from its metrics registry.
	known["leader_election_master_status"] = true

	var exprs []string
	for _, o := range byKind(objs, "PrometheusRule") {
		groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
		for _, g := range groups {
			rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
			for _, r := range rules {
				r := r.(map[string]any)
				expr, _ := r["expr"].(string)
				exprs = append(exprs, expr)
				if _, ok := r["alert"]; ok {
					ann, _, _ := unstructured.NestedStringMap(r, "annotations")
					if ann["summary"] == "" || ann["description"] == "" {
						t.Errorf("alert %v: want summary and description annotations", r["alert"])
					}
				}
			}
		}
	}
	if len(exprs) == 0 {
		t.Error("no PrometheusRule expressions rendered")
	}

	var dashboards int
	for _, o := range byKind(objs, "ConfigMap") {
		if o.GetLabels()["grafana_dashboard"] != "1" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		for file, text := range data {
			dashboards++
			var dash struct {
				Panels     []json.RawMessage `json:"panels"`
				Templating struct {
					List []struct {
						Name  string          `json:"name"`
						Query json.RawMessage `json:"query"`
					} `json:"list"`
				} `json:"templating"`
			}
			if err := json.Unmarshal([]byte(text), &dash); err != nil {
				t.Errorf("dashboard %s: %v", file, err)
				continue
			}
			var vars []string
			for _, v := range dash.Templating.List {
				vars = append(vars, v.Name)
				exprs = append(exprs, string(v.Query))
			}
			if d := cmp.Diff([]string{"datasource", "shard", "cluster"}, vars); d != "" {
				t.Errorf("dashboard %s template variables (-want +got):\n%s", file, d)
			}
			if len(dash.Panels) == 0 {
				t.Errorf("dashboard %s has no panels", file)
			}
			// Every "expr" anywhere in the panels.
			exprs = append(exprs, regexp.MustCompile(`"expr":\s*"((?:[^"\\]|\\.)*)"`).FindAllString(text, -1)...)
		}
	}
	if dashboards != 1 {
		t.Errorf("want one dashboard ConfigMap (label grafana_dashboard=1), got %d", dashboards)
	}

	if names := metricnames.Unknown(known, metricRE, strings.Join(exprs, "\n")); len(names) > 0 {
		t.Errorf("alerts or dashboard name metrics the controller does not export: %v", names)
	}
}

// exportedMetrics returns the names of the metrics the binary exports of its
// own: pkg/fleet's and pkg/remote's, and the manager's.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	rec := metricnames.NewRecorder()
	fleet.NewMetrics(rec)
	remote.NewMetrics(rec)
	for _, c := range fleet.ManagerCollectors() {
		if err := rec.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.Names) == 0 {
		t.Fatal("no metrics registered by pkg/fleet and pkg/remote")
	}
	return rec.Names
}

// warningRecorder collects the API server's warnings.
type warningRecorder struct {
	mu   sync.Mutex
	list []string
}

func (w *warningRecorder) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// reset returns the warnings since the last reset.
func (w *warningRecorder) reset() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.list
	w.list = nil
	return l
}

// decodeObjects splits a rendered YAML stream into objects.
func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("rendered object without kind, apiVersion or name: %v", u.Object)
		}
		objs = append(objs, u)
	}
}

func byKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func mustConvert(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		t.Fatalf("convert %s: %v", describe(u), err)
	}
}

func describe(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}
