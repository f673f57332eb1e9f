// Package metricnames reads the names of the metrics a program's collectors
// export, and finds the names a query or a page refers to that none of them
// is, for the tests that hold config/hub's alerts, dashboard and runbooks to
// the metrics the controller exports.
package metricnames

import (
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Recorder is a prometheus.Registerer that records the names of what is
// registered with it, from the collectors' descriptors.
type Recorder struct{ Names map[string]bool }

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{Names: map[string]bool{}} }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Register records c's metric names.
func (r *Recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.Names[m[1]] = true
		}
	}
	return nil
}

// MustRegister records each collector's metric names.
func (r *Recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

// Unregister does nothing.
func (r *Recorder) Unregister(prometheus.Collector) bool { return true }

// Unknown returns, sorted and once each, the names re finds in text that
// are not in known, a histogram's _bucket, _sum and _count counting as its
// own name.
func Unknown(known map[string]bool, re *regexp.Regexp, text string) []string {
	var out []string
	for _, m := range re.FindAllString(text, -1) {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suffix); ok && known[b] {
				base = b
			}
		}
		if !known[base] {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
