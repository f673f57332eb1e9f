package fleet

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/openshift/hub-node-metadata/internal/metricnames"
	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// The alerts of config/hub and their runbooks under docs/runbooks, one page
// per alert, which every alert links to with its runbook_url.
const (
	rulesFile   = "../../config/hub/base/prometheusrule.yaml"
	runbooksDir = "../../docs/runbooks"
	// RunbookURLPrefix is where an alert's runbook_url points: the page is
	// <prefix><alert>.md.
	runbookURLPrefix = "https://github.com/openshift/hub-node-metadata/blob/main/docs/runbooks/"
)

// runbookSections are the sections every runbook has, in this order.
var runbookSections = []string{"## Meaning", "## Impact", "## Diagnosis", "## Mitigation", "## Escalation"}

// exportedMetrics are the names of every metric the binary exports of its own.
func exportedMetrics() map[string]bool {
	r := metricnames.NewRecorder()
	NewMetrics(r)
	remote.NewMetrics(r)
	for _, c := range ManagerCollectors() {
		register(r, c)
	}
	return r.Names
}

var metricName = regexp.MustCompile(`hub_node_metadata_[a-z0-9_]+`)

// TestEveryAlertHasARunbook: every alert of config/hub links to a page of
// docs/runbooks of its own name with the five sections, every page is an
// alert's, and every hub_node_metadata_ metric a page names is one the
// binary exports (a histogram's _bucket, _sum and _count included).
func TestEveryAlertHasARunbook(t *testing.T) {
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Record      string            `json:"record"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		t.Fatal(err)
	}
	exported := exportedMetrics()
	if len(exported) < 10 {
		t.Fatalf("found %d exported metrics: the recorder is broken", len(exported))
	}
	alerts := map[string]bool{}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			if got, want := r.Annotations["runbook_url"], runbookURLPrefix+r.Alert+".md"; got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
			page, err := os.ReadFile(filepath.Join(runbooksDir, r.Alert+".md"))
			if err != nil {
				t.Errorf("%s: no runbook: %v", r.Alert, err)
				continue
			}
			text := string(page)
			if !strings.HasPrefix(text, "# "+r.Alert+"\n") {
				t.Errorf("%s.md does not start with its title", r.Alert)
			}
			at := 0
			for _, s := range runbookSections {
				i := strings.Index(text[at:], "\n"+s+"\n")
				if i < 0 {
					t.Errorf("%s.md: no %q section after the ones before it", r.Alert, s)
					break
				}
				at += i + 1
			}
			for _, name := range metricnames.Unknown(exported, metricName, text) {
				t.Errorf("%s.md names %s, which the binary does not export", r.Alert, name)
			}
		}
	}
	pages, err := filepath.Glob(filepath.Join(runbooksDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if name := strings.TrimSuffix(filepath.Base(p), ".md"); name != "README" && !alerts[name] {
			t.Errorf("docs/runbooks/%s.md is no alert's runbook", name)
		}
	}
}
