package int_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	gosync "sync"
	"syscall"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

// This file proves config/hub's monitoring: the PrometheusRule (promtool
// check and unit tests, then the alerts evaluated by a real Prometheus) and
// every query of the Grafana dashboard, against a real Prometheus scraping
// the real hub-controller binary on the local fleet.
//
// Prometheus and promtool come from hack/prometheus.sh (Debian's package
// when they are not on PATH); if that fails, the test fails.
//
// HUB_NODE_METADATA_SCREENSHOT=<file.png> (hack/screenshot.sh) also captures
// the drift panel's query graphed in Prometheus's web UI with headless
// Chromium once the drift has come and gone.

const (
	rulePath      = "../config/hub/base/prometheusrule.yaml"
	ruleTestPath  = "../config/hub/tests/prometheusrule_test.yaml"
	dashboardPath = "../config/hub/dashboards/hub-node-metadata.json"
	// ruleFileName is the name the committed promtool test file expects
	// (rule_files) for the PrometheusRule's spec, next to it.
	ruleFileName = "prometheusrule.rules.yaml"
	// Labels the ServiceMonitor's targets carry in a cluster, and the
	// test's targets too.
	monitoringNamespace = "hub-node-metadata"
	driftPanel          = "Drifted objects: top 20 cluster/pool"
)

// monitoringTools runs hack/prometheus.sh (once per test) and returns the
// paths it prints.
func monitoringTools(t *testing.T, withChromium bool) (prometheus, promtool, chromium string) {
	t.Helper()
	args := []string{}
	if withChromium {
		args = append(args, "--with-chromium")
	}
	cmd := exec.Command("../hack/prometheus.sh", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/prometheus.sh %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("hack/prometheus.sh (%s): %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr.String()))
	}
	paths := strings.Fields(stdout.String())
	want := 2
	if withChromium {
		want = 3
	}
	if len(paths) != want {
		t.Fatalf("hack/prometheus.sh printed %q, want %d paths", stdout.String(), want)
	}
	if withChromium {
		chromium = paths[2]
	}
	return paths[0], paths[1], chromium
}

// decodeYAML reads a YAML (or JSON) file into v.
func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

type ruleSpec struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert  string `json:"alert,omitempty"`
			Record string `json:"record,omitempty"`
			Expr   string `json:"expr"`
			For    string `json:"for,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// extractRules writes the PrometheusRule's spec as a plain rules file (JSON,
// which Prometheus reads as YAML) into dir and returns its path, the spec,
// and the alerts' names.
func extractRules(t *testing.T, dir string) (string, ruleSpec, map[string]string) {
	t.Helper()
	var pr struct {
		Kind string          `json:"kind"`
		Spec json.RawMessage `json:"spec"`
	}
	decodeYAML(t, rulePath, &pr)
	if pr.Kind != "PrometheusRule" || len(pr.Spec) == 0 {
		t.Fatalf("%s: not a PrometheusRule with a spec", rulePath)
	}
	var spec ruleSpec
	if err := json.Unmarshal(pr.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]string{}
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts[r.Alert] = r.Expr
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("%s holds no alert", rulePath)
	}
	path := filepath.Join(dir, ruleFileName)
	if err := os.WriteFile(path, pr.Spec, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, spec, alerts
}

// checkRuleTestCoverage fails unless the promtool test file has, for every
// alert, a case where it fires and a case where it does not.
func checkRuleTestCoverage(t *testing.T, alerts map[string]string) {
	t.Helper()
	var file struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			Name       string `json:"name"`
			AlertTests []struct {
				Alertname string            `json:"alertname"`
				ExpAlerts []json.RawMessage `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	decodeYAML(t, ruleTestPath, &file)
	if len(file.RuleFiles) != 1 || file.RuleFiles[0] != ruleFileName {
		t.Errorf("%s: rule_files must be [%s] (the extracted spec), got %v", ruleTestPath, ruleFileName, file.RuleFiles)
	}
	fires, silent := map[string]int{}, map[string]int{}
	for _, tc := range file.Tests {
		for _, at := range tc.AlertTests {
			if _, ok := alerts[at.Alertname]; !ok {
				t.Errorf("%s: test %q checks %s, which the rule does not define", ruleTestPath, tc.Name, at.Alertname)
			}
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname]++
			} else {
				silent[at.Alertname]++
			}
		}
	}
	for a := range alerts {
		if fires[a] == 0 || silent[a] == 0 {
			t.Errorf("%s: alert %s needs a case where it fires (has %d) and one where it does not (has %d)", ruleTestPath, a, fires[a], silent[a])
		}
	}
}

func runTool(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// promServer is a Prometheus process scraping the targets written into its
// file_sd file.
type promServer struct {
	URL     string
	cmd     *exec.Cmd
	targets string
	log     *bytes.Buffer
	mu      *gosync.Mutex
}

func startPrometheus(t *testing.T, bin, rules string) *promServer {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	ps := &promServer{URL: fmt.Sprintf("http://127.0.0.1:%d", port), targets: filepath.Join(dir, "targets.json"), log: &bytes.Buffer{}, mu: &gosync.Mutex{}}
	ps.setTargets(t)
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
- %q
scrape_configs:
- job_name: hub-node-metadata
  file_sd_configs:
  - files:
    - %q
    refresh_interval: 1s
`, rules, ps.targets)
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ps.cmd = exec.Command(bin,
		"--config.file="+configPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		"--web.console.templates="+filepath.Join(dir, "consoles"),
		"--web.console.libraries="+filepath.Join(dir, "console_libraries"),
		"--log.level=warn")
	ps.cmd.Stdout = lockedWriter{ps.mu, ps.log}
	ps.cmd.Stderr = lockedWriter{ps.mu, ps.log}
	if err := ps.cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = ps.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = ps.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = ps.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			ps.mu.Lock()
			t.Logf("prometheus log:\n%s", tail(ps.log.String(), 40))
			ps.mu.Unlock()
		}
	})
	waitFor(t, "prometheus ready", 30*time.Second, func() bool {
		select {
		case <-exited:
			ps.mu.Lock()
			defer ps.mu.Unlock()
			t.Fatalf("prometheus exited: %s", ps.log.String())
		default:
		}
		resp, err := http.Get(ps.URL + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return ps
}

// setTargets replaces the scraped controllers (file_sd, written atomically;
// Prometheus notices within a second). Each target gets the namespace and
// pod labels the ServiceMonitor would give it.
func (ps *promServer) setTargets(t *testing.T, procs ...*controllerProcess) {
	t.Helper()
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	groups := []group{}
	for i, p := range procs {
		u, err := url.Parse(p.metrics)
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, group{Targets: []string{u.Host}, Labels: map[string]string{
			"namespace": monitoringNamespace, "pod": fmt.Sprintf("hub-node-metadata-%d", i)}})
	}
	b, _ := json.Marshal(groups)
	tmp := ps.targets + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, ps.targets); err != nil {
		t.Fatal(err)
	}
}

type promSample struct {
	Metric map[string]string
	Value  float64
}

func (s promSample) String() string {
	keys := make([]string, 0, len(s.Metric))
	for k := range s.Metric {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", k, s.Metric[k])
	}
	fmt.Fprintf(&b, "} %g", s.Value)
	return b.String()
}

func samplesString(ss []promSample) string {
	if len(ss) == 0 {
		return "(no series)"
	}
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.String()
	}
	return strings.Join(parts, "; ")
}

func (ps *promServer) get(path string, q url.Values, out any) error {
	resp, err := http.Get(ps.URL + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Warnings  []string        `json:"warnings"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", env.ErrorType, env.Error)
	}
	if len(env.Warnings) > 0 {
		return fmt.Errorf("warnings: %v", env.Warnings)
	}
	return json.Unmarshal(env.Data, out)
}

// query runs an instant query (as Grafana's stat and table panels, and as
// the last point of a time series panel).
func (ps *promServer) query(expr string) ([]promSample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := ps.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	parse := func(v []any) (float64, error) {
		s, _ := v[1].(string)
		return strconv.ParseFloat(s, 64)
	}
	switch data.ResultType {
	case "vector":
		var raw []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &raw); err != nil {
			return nil, err
		}
		out := make([]promSample, 0, len(raw))
		for _, r := range raw {
			v, err := parse(r.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, promSample{Metric: r.Metric, Value: v})
		}
		return out, nil
	case "scalar":
		var raw []any
		if err := json.Unmarshal(data.Result, &raw); err != nil {
			return nil, err
		}
		v, err := parse(raw)
		return []promSample{{Metric: map[string]string{}, Value: v}}, err
	}
	return nil, fmt.Errorf("result type %s", data.ResultType)
}

// labelValues runs Grafana's label_values(selector, label) as Grafana does.
func (ps *promServer) labelValues(selector, label string) ([]string, error) {
	var out []string
	q := url.Values{"start": {strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10)}, "end": {strconv.FormatInt(time.Now().Unix(), 10)}}
	if selector != "" {
		q.Set("match[]", selector)
	}
	err := ps.get("/api/v1/label/"+label+"/values", q, &out)
	return out, err
}

// promPoll is how often the tests query Prometheus, which scrapes and
// evaluates every second.
const promPoll = 250 * time.Millisecond

// waitQuery polls expr until cond holds.
func (ps *promServer) waitQuery(t *testing.T, what string, timeout time.Duration, expr string, cond func([]promSample) bool) []promSample {
	t.Helper()
	var last []promSample
	var lastErr error
	took, ok := poll(t.Context(), promPoll, timeout, func() bool {
		last, lastErr = ps.query(expr)
		return lastErr == nil && cond(last)
	})
	if !ok {
		t.Fatalf("%s: not within %s\nquery: %s\nlast result: %s (error %v)", what, timeout, expr, samplesString(last), lastErr)
	}
	t.Logf("%s: %s (%s)", what, samplesString(last), took.Round(time.Millisecond))
	return last
}

func alertsExpr(alert, state string) string {
	return fmt.Sprintf(`ALERTS{alertname=%q, alertstate=%q}`, alert, state)
}

// waitAlert waits until the alert is in state (pending or firing) for a
// series carrying labels.
func (ps *promServer) waitAlert(t *testing.T, alert, state string, labels map[string]string, timeout time.Duration) {
	t.Helper()
	ps.waitQuery(t, alert+" "+state, timeout, alertsExpr(alert, state), func(ss []promSample) bool { return anyMatches(ss, labels) })
}

// waitNoAlert waits until no series carrying labels is pending or firing.
func (ps *promServer) waitNoAlert(t *testing.T, alert string, labels map[string]string, timeout time.Duration) {
	t.Helper()
	ps.waitQuery(t, alert+" resolved", timeout, fmt.Sprintf(`ALERTS{alertname=%q}`, alert), func(ss []promSample) bool { return !anyMatches(ss, labels) })
}

func anyMatches(ss []promSample, labels map[string]string) bool {
	for _, s := range ss {
		if matches(s, labels) {
			return true
		}
	}
	return false
}

func matches(s promSample, labels map[string]string) bool {
	for k, v := range labels {
		if s.Metric[k] != v {
			return false
		}
	}
	return true
}

func valueOf(ss []promSample, labels map[string]string) (float64, bool) {
	for _, s := range ss {
		if matches(s, labels) {
			return s.Value, true
		}
	}
	return 0, false
}

// dashboard is the Grafana dashboard's queries.
type dashboard struct {
	targets   []dashTarget
	variables []dashVariable
}

type dashTarget struct {
	panel, refID, expr string
}

func (d dashTarget) String() string { return fmt.Sprintf("panel %q %s", d.panel, d.refID) }

type dashVariable struct{ name, query string }

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var raw struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var d dashboard
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, r := range ps {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: panel: %v", dashboardPath, err)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q target %s has no expr", dashboardPath, p.Title, tg.RefID)
					continue
				}
				d.targets = append(d.targets, dashTarget{panel: p.Title, refID: tg.RefID, expr: tg.Expr})
			}
			walk(p.Panels) // collapsed rows hold their panels
		}
	}
	walk(raw.Panels)
	for _, v := range raw.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if json.Unmarshal(v.Query, &s) != nil {
				t.Fatalf("%s: variable %s: query is neither an object nor a string", dashboardPath, v.Name)
			}
			q.Query = s
		}
		d.variables = append(d.variables, dashVariable{name: v.Name, query: q.Query})
	}
	if len(d.targets) == 0 {
		t.Fatalf("%s: no queries", dashboardPath)
	}
	return d
}

// target returns the query of a panel's target.
func (d dashboard) target(t *testing.T, panel, refID string) dashTarget {
	t.Helper()
	var titles []string
	for _, tg := range d.targets {
		if tg.panel == panel && tg.refID == refID {
			return tg
		}
		titles = append(titles, tg.String())
	}
	t.Fatalf("%s: no panel %q with target %s; have %v", dashboardPath, panel, refID, titles)
	return dashTarget{}
}

var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)`)

// substitute replaces Grafana's variables as Grafana would for a 1s-scrape
// Prometheus: shard and cluster by their regex (".*" for All), the interval
// macros by durations that hold several scrapes.
func substitute(t *testing.T, expr string, vars map[string]string) string {
	t.Helper()
	all := map[string]string{
		"__rate_interval": "1m", "__interval": "15s", "__interval_ms": "15000",
		"__range": "5m", "__range_s": "300", "__range_ms": "300000",
	}
	for k, v := range vars {
		all[k] = v
	}
	var unknown []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		sm := grafanaVar.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		if v, ok := all[name]; ok {
			return v
		}
		unknown = append(unknown, name)
		return m
	})
	if len(unknown) > 0 {
		t.Errorf("%s: query uses variables the dashboard does not define (or this test does not know): %v in %s", dashboardPath, unknown, expr)
	}
	return out
}

var labelValuesCall = regexp.MustCompile(`^\s*label_values\((?:(.*),\s*)?(\w+)\s*\)\s*$`)

// checkAll runs every dashboard query and every alert expression once with
// vars and fails on any error; it returns the dashboard results by target
// and records which targets returned data.
func checkAll(t *testing.T, ps *promServer, d dashboard, alerts map[string]string, vars map[string]string, phase string, hadData map[string]bool) map[string][]promSample {
	t.Helper()
	res := map[string][]promSample{}
	for _, tg := range d.targets {
		expr := substitute(t, tg.expr, vars)
		ss, err := ps.query(expr)
		if err != nil {
			t.Errorf("%s: dashboard %s: %v\nquery: %s", phase, tg, err, expr)
			continue
		}
		res[tg.String()] = ss
		if len(ss) > 0 {
			hadData[tg.String()] = true
		}
	}
	for _, v := range d.variables {
		m := labelValuesCall.FindStringSubmatch(v.query)
		if m == nil {
			t.Errorf("dashboard variable %s: not a label_values() query: %s", v.name, v.query)
			continue
		}
		if _, err := ps.labelValues(substitute(t, m[1], vars), m[2]); err != nil {
			t.Errorf("%s: dashboard variable %s: %v\nquery: %s", phase, v.name, err, v.query)
		}
	}
	for name, expr := range alerts {
		if _, err := ps.query(expr); err != nil {
			t.Errorf("%s: alert %s: %v\nexpr: %s", phase, name, err, expr)
		}
	}
	return res
}

func TestPrometheusRulesAndDashboard(t *testing.T) {
	t.Parallel()
	screenshot := os.Getenv("HUB_NODE_METADATA_SCREENSHOT")
	promBin, promtool, chromium := monitoringTools(t, screenshot != "")
	dir := t.TempDir()
	rules, _, alerts := extractRules(t, dir)

	// Static: promtool checks the rule and runs the committed unit tests.
	out := runTool(t, dir, promtool, "check", "rules", ruleFileName)
	t.Logf("promtool check rules:\n%s", strings.TrimSpace(out))
	checkRuleTestCoverage(t, alerts)
	testFile, err := os.ReadFile(ruleTestPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(ruleTestPath)), testFile, 0o644); err != nil {
		t.Fatal(err)
	}
	out = runTool(t, dir, promtool, "test", "rules", filepath.Base(ruleTestPath))
	t.Logf("promtool test rules:\n%s", strings.TrimSpace(out))
	if t.Failed() {
		return
	}

	d := loadDashboard(t)
	ctx := testContext(t, 4*time.Minute)

	// The fleet: one spoke to drift, one to black-hole, one with a refused pool.
	f := startOwnFleet(t, ctx, 3)
	drifting, holed, refused := f.Spokes()[0], f.Spokes()[1], f.Spokes()[2]
	// 2 Machines + 2 Nodes to adopt on the drifting spoke, 3 + 3 on the
	// other (so that the two lines of the drift graph do not overlap).
	addInfraPool(t, ctx, drifting, 2)
	addInfraPool(t, ctx, holed, 3)
	addInfraPool(t, ctx, refused, 1)
	proxy, err := holed.UseProxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	setReservedLabel := func(v string) {
		t.Helper()
		if _, err := refused.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
			if v == "" {
				delete(spec.Labels, "kubernetes.io/hostname")
			} else {
				spec.Labels["kubernetes.io/hostname"] = v
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	setReservedLabel("pinned") // the kubernetes.io domain is reserved: ReservedKey
	kc := controllerKubeconfig(t, ctx, f)
	ps := startPrometheus(t, promBin, rules)

	// Prometheus loaded every alert of the rule.
	var rulesData struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Type      string `json:"type"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	var ruleStates []string
	if _, ok := poll(ctx, promPoll, 10*time.Second, func() bool {
		ruleStates = nil
		if err := ps.get("/api/v1/rules", url.Values{}, &rulesData); err != nil {
			t.Fatalf("rules API: %v", err)
		}
		healthy := 0
		for _, g := range rulesData.Groups {
			for _, r := range g.Rules {
				ruleStates = append(ruleStates, fmt.Sprintf("%s %s %s %s", r.Type, r.Name, r.Health, r.LastError))
				if r.Type == "alerting" && r.Health == "ok" {
					healthy++
				}
			}
		}
		return healthy == len(alerts)
	}); !ok {
		t.Fatalf("Prometheus has not evaluated the %d alerts of the rule without error: %v", len(alerts), ruleStates)
	}
	t.Logf("Prometheus evaluates the rule: %v", ruleStates)

	// Fast flags: notice a black hole in seconds, reconnect quickly, and
	// call an object contested after 2 repairs.
	fast := []string{"--spoke-request-timeout", "2s", "--spoke-connect-timeout", "5s", "--spoke-probe-failures", "2",
		"--spoke-backoff-cap", "2s", "--contested-threshold", "2"}
	all := map[string]string{"shard": ".*", "cluster": ".*"}
	only := func(s *localfleet.Spoke) map[string]string {
		return map[string]string{"shard": ".*", "cluster": regexp.QuoteMeta(s.Key().String())}
	}
	hadData := map[string]bool{}
	q := func(panel, refID string, vars map[string]string) string {
		return substitute(t, d.target(t, panel, refID).expr, vars)
	}
	key := func(s *localfleet.Spoke) string { return s.Key().String() }
	// The pool label is the MachinePool's name (<cluster>-infra here).
	pool := func(s *localfleet.Spoke) string { return s.Name + "-infra" }
	scenario := time.Now()
	var driftSeen time.Time

	// Variables: the cluster variable lists the fleet, as Grafana would show it.
	checkVariables := func() {
		t.Helper()
		for _, v := range d.variables {
			m := labelValuesCall.FindStringSubmatch(v.query)
			if m == nil || v.name != "cluster" {
				continue
			}
			vals, err := ps.labelValues(substitute(t, m[1], all), m[2])
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range f.Spokes() {
				if !strings.Contains(strings.Join(vals, " "), key(s)) {
					t.Errorf("variable cluster: %v lacks %s", vals, key(s))
				}
			}
		}
	}

	// 1. Dry run: the drift stays, the refused pool is refused.
	t.Run("drift in dry run", func(t *testing.T) {
		dry := startBinary(t, kc, append([]string{"--dry-run"}, fast...)...)
		ps.setTargets(t, dry)
		ps.waitQuery(t, "drift panel shows the dry run's drift", time.Minute, q(driftPanel, "A", all), func(ss []promSample) bool {
			v, ok := valueOf(ss, map[string]string{"cluster": key(drifting), "pool": pool(drifting)})
			w, _ := valueOf(ss, map[string]string{"cluster": key(holed), "pool": pool(holed)})
			return ok && v == 4 && w == 6 // every Machine and Node still to adopt
		})
		driftSeen = time.Now()
		ps.waitQuery(t, "drift by kind", 10*time.Second, q("Drifted objects by kind", "A", only(drifting)), func(ss []promSample) bool {
			m, _ := valueOf(ss, map[string]string{"kind": "Machine"})
			n, _ := valueOf(ss, map[string]string{"kind": "Node"})
			return m == 2 && n == 2
		})
		ps.waitQuery(t, "refused pool in the refusals panel", 30*time.Second, q("Refused pools by reason", "A", all), func(ss []promSample) bool {
			v, ok := valueOf(ss, map[string]string{"reason": "ReservedKey"})
			return ok && v == 1
		})
		ps.waitQuery(t, "clusters by state", 30*time.Second, q("Clusters by state", "A", all), func(ss []promSample) bool {
			dr, _ := valueOf(ss, map[string]string{"state": "drifting"})
			rf, _ := valueOf(ss, map[string]string{"state": "refused"})
			return dr == 2 && rf == 1
		})
		ps.waitAlert(t, "HubNodeMetadataDriftPersists", "pending", map[string]string{"cluster": key(drifting), "pool": pool(drifting), "severity": "warning"}, 10*time.Second)
		ps.waitAlert(t, "HubNodeMetadataPoolRefused", "pending", map[string]string{"cluster": key(refused), "pool": pool(refused), "reason": "ReservedKey"}, 10*time.Second)
		ps.waitQuery(t, "the drift alert's expression", 5*time.Second, alerts["HubNodeMetadataDriftPersists"], func(ss []promSample) bool {
			v, ok := valueOf(ss, map[string]string{"cluster": key(drifting), "pool": pool(drifting)})
			return ok && v == 4
		})
		checkVariables()
		checkAll(t, ps, d, alerts, all, "dry run", hadData)
		checkAll(t, ps, d, alerts, only(drifting), "dry run, one cluster", hadData)
		if screenshot != "" {
			time.Sleep(15 * time.Second) // a plateau worth drawing
		}
		kill(t, dry)
	})
	if t.Failed() {
		return
	}

	// 2. The real controller: drift clears, writes and syncs show, the
	// refusal is counted and then fixed, a fight with another writer shows
	// as contested.
	ctrl := startBinary(t, kc, fast...)
	ps.setTargets(t, ctrl)
	t.Run("drift fixed", func(t *testing.T) {
		ps.waitQuery(t, "drift panel back at 0", time.Minute, q(driftPanel, "A", all), func(ss []promSample) bool {
			v, ok := valueOf(ss, map[string]string{"cluster": key(drifting), "pool": pool(drifting)})
			for _, s := range ss {
				if s.Value != 0 {
					return false
				}
			}
			return ok && v == 0
		})
		if !nodesHold(ctx, drifting, "infra", hasLabel("node-role.kubernetes.io/infra", "")) {
			t.Error("drift panel at 0 but the Nodes lack the pool's label")
		}
		ps.waitNoAlert(t, "HubNodeMetadataDriftPersists", map[string]string{}, 10*time.Second)
		ps.waitQuery(t, "clusters by state", 10*time.Second, q("Clusters by state over time", "A", all), func(ss []promSample) bool {
			in, _ := valueOf(ss, map[string]string{"state": "in_sync"})
			dr, _ := valueOf(ss, map[string]string{"state": "drifting"})
			return in == 2 && dr == 0
		})
		ps.waitQuery(t, "spokes connected", 10*time.Second, q("Spokes connected", "A", all), func(ss []promSample) bool { return len(ss) == 1 && ss[0].Value == 3 })

		// The refusal counter moves when the refused pool is synced again.
		ps.waitQuery(t, "refusal counted", 30*time.Second, `hub_node_metadata_refusals_total{job="hub-node-metadata"}`, func(ss []promSample) bool { return len(ss) > 0 })
		setReservedLabel("pinned-again")
		ps.waitQuery(t, "refusals per second", 30*time.Second, q("Refusals per second by reason", "A", all), func(ss []promSample) bool {
			v, _ := valueOf(ss, map[string]string{"reason": "ReservedKey"})
			return v > 0
		})
		setReservedLabel("")
		ps.waitQuery(t, "refusals panel empty once the pool is fixed", 30*time.Second, q("Refused pools by reason", "A", all), func(ss []promSample) bool { return len(ss) == 0 })
		ps.waitNoAlert(t, "HubNodeMetadataPoolRefused", map[string]string{}, 10*time.Second)

		// Another writer removes the pool's label twice: contested.
		nodes, err := drifting.Nodes(ctx, "infra")
		if err != nil || len(nodes) == 0 {
			t.Fatalf("nodes: %v %d", err, len(nodes))
		}
		victim := nodes[0].Name
		for i := range 2 {
			if err := drifting.RemoveNodeLabel(ctx, victim, "node-role.kubernetes.io/infra"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, fmt.Sprintf("removal %d repaired", i+1), 30*time.Second, func() bool {
				n := corev1.Node{}
				return drifting.Admin.Get(ctx, types.NamespacedName{Name: victim}, &n) == nil && hasLabel("node-role.kubernetes.io/infra", "")(n)
			})
		}
		ps.waitQuery(t, "contested panel", 30*time.Second, q("Contested objects", "A", all), func(ss []promSample) bool {
			v, _ := valueOf(ss, map[string]string{"cluster": key(drifting), "pool": pool(drifting)})
			return v >= 1
		})
		// A counter's first increment is invisible to rate() (the series is
		// born with it), so the adoption burst at start does not show; the
		// repairs above do.
		ps.waitQuery(t, "writes", 10*time.Second, q("Writes per second by kind and result", "A", all), func(ss []promSample) bool {
			v, _ := valueOf(ss, map[string]string{"kind": "Node", "result": "Patched"})
			return v > 0
		})
		ps.waitAlert(t, "HubNodeMetadataContestedObjects", "pending", map[string]string{"cluster": key(drifting), "pool": pool(drifting)}, 10*time.Second)

		// Sync latency and rates have data (the syncs above happened while
		// Prometheus scraped).
		for _, ref := range []string{"A", "B", "C"} {
			ps.waitQuery(t, "sync duration "+ref, 30*time.Second, q("Sync duration (per cluster)", ref, all), func(ss []promSample) bool {
				return len(ss) == 1 && !math.IsNaN(ss[0].Value) && ss[0].Value > 0
			})
		}
		ps.waitQuery(t, "syncs per second", 10*time.Second, q("Syncs per second by result", "A", all), func(ss []promSample) bool { return len(ss) > 0 && ss[0].Value > 0 })
		ps.waitQuery(t, "spoke requests per second", 10*time.Second, q("Spoke requests per second by code", "A", all), func(ss []promSample) bool {
			v, _ := valueOf(ss, map[string]string{"code": "200"})
			return v > 0
		})
		ps.waitQuery(t, "spoke request latency p99", 10*time.Second, q("Spoke request latency p99 by verb and resource", "A", all), func(ss []promSample) bool {
			for _, s := range ss {
				if s.Metric["verb"] == "PATCH" || s.Metric["verb"] == "patch" {
					return !math.IsNaN(s.Value) && s.Value > 0
				}
			}
			return false
		})
		ps.waitQuery(t, "time since last sync", 10*time.Second, q("Time since last complete sync", "A", only(drifting)), func(ss []promSample) bool {
			return len(ss) == 1 && ss[0].Value >= 0 && ss[0].Value < 120
		})
		ps.waitQuery(t, "cluster state table", 10*time.Second, q("Cluster state", "A", only(drifting)), func(ss []promSample) bool {
			return len(ss) == 1 && ss[0].Metric["state"] == "in_sync"
		})
		checkAll(t, ps, d, alerts, all, "controller", hadData)
		checkAll(t, ps, d, alerts, only(drifting), "controller, one cluster", hadData)
		if screenshot != "" {
			time.Sleep(10 * time.Second)
			captureGraph(t, chromium, ps, q(driftPanel, "A", all), time.Since(driftSeen)+5*time.Second, screenshot)
		}
	})
	if t.Failed() {
		return
	}

	// 3. A black-holed spoke: unreachable, its alert pending; healed, it clears.
	t.Run("black-holed spoke", func(t *testing.T) {
		proxy.BlackHole(true)
		if _, err := holed.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/wave"] = "1" }); err != nil {
			t.Fatal(err)
		}
		ps.waitQuery(t, "cluster state table shows unreachable", time.Minute, q("Cluster state", "A", only(holed)), func(ss []promSample) bool {
			return len(ss) == 1 && ss[0].Metric["state"] == "unreachable"
		})
		ps.waitAlert(t, "HubNodeMetadataClusterUnreachable", "pending", map[string]string{"cluster": key(holed), "severity": "warning"}, 10*time.Second)
		ps.waitQuery(t, "clusters by state", 10*time.Second, q("Clusters by state", "A", all), func(ss []promSample) bool {
			v, _ := valueOf(ss, map[string]string{"state": "unreachable"})
			return v == 1
		})
		ps.waitQuery(t, "spokes not connected", 30*time.Second, q("Spokes connected", "B", all), func(ss []promSample) bool { return len(ss) == 1 && ss[0].Value == 1 })
		ps.waitQuery(t, "clusters not connected", 10*time.Second, q("Clusters not connected", "A", all), func(ss []promSample) bool {
			return len(ss) == 1 && ss[0].Metric["cluster"] == key(holed)
		})
		ps.waitQuery(t, "connection errors", 30*time.Second, q("Connection errors per second by reason", "A", only(holed)), func(ss []promSample) bool { return len(ss) > 0 })
		checkAll(t, ps, d, alerts, all, "black hole", hadData)
		checkAll(t, ps, d, alerts, only(holed), "black hole, one cluster", hadData)

		proxy.BlackHole(false)
		ps.waitQuery(t, "healed spoke in sync", time.Minute, q("Cluster state", "A", only(holed)), func(ss []promSample) bool {
			return len(ss) == 1 && ss[0].Metric["state"] == "in_sync"
		})
		ps.waitNoAlert(t, "HubNodeMetadataClusterUnreachable", map[string]string{}, 10*time.Second)
		ps.waitQuery(t, "writes to Machines and Nodes", 10*time.Second, q("Writes per second by kind and result", "A", all), func(ss []promSample) bool {
			m, _ := valueOf(ss, map[string]string{"kind": "Machine", "result": "Patched"})
			n, _ := valueOf(ss, map[string]string{"kind": "Node", "result": "Patched"})
			return m > 0 && n > 0
		})
		if !nodesHold(ctx, holed, "infra", hasLabel("example.com/wave", "1")) {
			t.Error("healed spoke in sync but its Nodes lack the change made while black-holed")
		}

		// The change made while black-holed (and the refused pool's fix
		// before it) were timed: the heatmap counts them, the recording
		// rules give their quantiles and the SLO's error ratio.
		ps.waitQuery(t, "propagation heatmap", 30*time.Second, q("Pool change propagation (heatmap)", "A", all), func(ss []promSample) bool {
			n := 0.0
			for _, s := range ss {
				n += s.Value
			}
			return n > 0
		})
		ps.waitQuery(t, "propagation p99", 30*time.Second, q("Pool change propagation p50 / p99 (last hour)", "B", all), func(ss []promSample) bool {
			v, ok := valueOf(ss, map[string]string{"delivery": "immediate"})
			return ok && !math.IsNaN(v) && v > 0
		})
		ps.waitQuery(t, "propagation SLO error ratio", 30*time.Second, q("Propagation SLO: share of changes slower than 10 s", "A", all), func(ss []promSample) bool {
			return len(ss) == 1 && ss[0].Value >= 0 && ss[0].Value <= 1
		})
	})
	if t.Failed() {
		return
	}

	// 4. A replica that cannot get the Lease (held by someone else): no
	// leader. Then every replica down: controller down.
	t.Run("no leader, then down", func(t *testing.T) {
		now := metav1.NewMicroTime(time.Now())
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: monitoringNamespace, Name: "hub-node-metadata"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To[int32](3600),
				AcquireTime: &now, RenewTime: &now},
		}
		if err := f.Hub.Client.Create(ctx, lease); err != nil {
			t.Fatal(err)
		}
		standby := startBinary(t, kc, append([]string{"--leader-elect", "--leader-elect-namespace", monitoringNamespace}, fast...)...)
		ps.setTargets(t, ctrl, standby)
		ps.waitQuery(t, "shard leaders panel shows the Lease without leader", 30*time.Second, q("Shard leaders", "A", all), func(ss []promSample) bool {
			v, ok := valueOf(ss, map[string]string{"name": "hub-node-metadata"})
			return ok && v == 0
		})
		ps.waitAlert(t, "HubNodeMetadataNoLeader", "pending", map[string]string{"namespace": monitoringNamespace, "name": "hub-node-metadata", "severity": "critical"}, 10*time.Second)
		checkAll(t, ps, d, alerts, all, "no leader", hadData)

		for _, p := range []*controllerProcess{ctrl, standby} {
			kill(t, p)
		}
		ps.waitAlert(t, "HubNodeMetadataControllerDown", "pending", map[string]string{"namespace": monitoringNamespace, "severity": "critical"}, 15*time.Second)
		checkAll(t, ps, d, alerts, all, "down", hadData)
	})

	var never []string
	for _, tg := range d.targets {
		if !hadData[tg.String()] {
			never = append(never, tg.String())
		}
	}
	t.Logf("%d dashboard queries and %d alert expressions ran in every phase without error; scenario took %s", len(d.targets), len(alerts), time.Since(scenario).Round(time.Second))
	if len(never) > 0 {
		t.Logf("dashboard queries that never returned series here (nothing in these scenarios produces them): %v", never)
	}
}

// captureGraph draws expr over the last span in Prometheus's own graph page
// with headless Chromium into file.
func captureGraph(t *testing.T, chromium string, ps *promServer, expr string, span time.Duration, file string) {
	t.Helper()
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		t.Fatal(err)
	}
	rangeInput := fmt.Sprintf("%ds", int(span.Round(time.Second).Seconds()))
	page := ps.URL + "/graph?" + url.Values{"g0.expr": {expr}, "g0.tab": {"0"}, "g0.range_input": {rangeInput}, "g0.stacked": {"0"}}.Encode()
	profile := t.TempDir()
	cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--virtual-time-budget=10000",
		"--user-data-dir="+profile, "--screenshot="+abs, "--window-size=1400,900", page)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	st, err := os.Stat(abs)
	if err != nil || st.Size() == 0 {
		t.Fatalf("chromium wrote no screenshot: %v\n%s", err, out)
	}
	t.Logf("screenshot of %s (%d bytes): %s", page, st.Size(), abs)
}
