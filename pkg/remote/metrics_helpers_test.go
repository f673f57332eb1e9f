package remote

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	if mf := family(t, reg, name); mf != nil {
		return len(mf.GetMetric())
	}
	return 0
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	mf := family(t, reg, name)
	if mf == nil {
		return -1
	}
	for _, m := range mf.GetMetric() {
		match := true
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
				match = false
			}
		}
		if match {
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	mf := family(t, reg, name)
	sum := 0.0
	if mf != nil {
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
