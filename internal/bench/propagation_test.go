package bench

import (
	"fmt"
	"math"
	"testing"
)

func TestPropagationCheck(t *testing.T) {
	bounds := []string{"0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"}
	samples := func(cum []float64, other float64) Samples {
		s := Samples{}
		for i, le := range bounds {
			s[fmt.Sprintf(`%s_bucket{delivery="immediate",le="%s"}`, propagationMetric, le)] = cum[i]
			s[fmt.Sprintf(`%s_bucket{delivery="paced",le="%s"}`, propagationMetric, le)] = other
		}
		s[propagationMetric+`_count{delivery="immediate"}`] = cum[len(cum)-1]
		s[propagationMetric+`_count{delivery="paced"}`] = other
		return s
	}
	// Before: 3 earlier changes (≤ 50 ms). The wave: 100 changes, 90 in
	// (0.1, 0.25], 10 in (0.25, 0.5]; the paced series moves and is ignored.
	before := samples([]float64{3, 3, 3, 3, 3, 3, 3}, 0)
	after := samples([]float64{3, 3, 93, 103, 103, 103, 103}, 7)
	perPool := map[string]float64{}
	for i := range 100 {
		perPool[fmt.Sprint(i)] = 150 + float64(i) // 150..249 ms
	}
	pc := propagationCheck(before, after, perPool, 0.25)
	// rank 99 of 100 falls in (0.25, 0.5] at 9/10 of it: 0.475 s.
	if pc.Observed != 100 || pc.Pools != 100 || math.Abs(pc.HistogramP99Ms-475) > 1e-9 || pc.HistogramBucket != "(0.25, 0.5] s" {
		t.Errorf("histogram side: %+v", pc)
	}
	// The objective's bucket counted 90 of the 100.
	if pc.ObjectiveS != 0.25 || pc.WithinObjective != 90 {
		t.Errorf("within the objective: %+v", pc)
	}
	if pc.MeasuredP99Ms != 248 || pc.MeasuredBucket != "(0.1, 0.25] s" || pc.BucketsApart != 1 {
		t.Errorf("measured side: %+v", pc)
	}
	// A p99 past the last finite bound reads as that bound, as histogram_quantile does.
	after = samples([]float64{3, 3, 3, 3, 3, 3, 13}, 0)
	if pc := propagationCheck(before, after, perPool, 0.25); pc.HistogramP99Ms != 2500 || pc.HistogramBucket != "(2.5, +Inf] s" || pc.BucketsApart != 4 {
		t.Errorf("over the top bound: %+v", pc)
	}
	// Nothing observed: no figures.
	if pc := propagationCheck(before, before, perPool, 0.25); pc.Observed != 0 || pc.HistogramP99Ms != 0 {
		t.Errorf("nothing observed: %+v", pc)
	}
}
