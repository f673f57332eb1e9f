package bench

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
)

// PropagationCheck sets the controller's own propagation histogram
// (hub_node_metadata_pool_propagation_seconds, delivery=immediate, the
// SLO's series) beside the bench's measurement of the same wave.
type PropagationCheck struct {
	// Pools is how many pools the wave changed; Observed how many changes
	// the histogram counted during it.
	Pools    int `json:"pools"`
	Observed int `json:"observed"`
	// HistogramP99Ms is histogram_quantile(0.99) over the wave's
	// observations (the buckets' increase), as Prometheus computes it.
	HistogramP99Ms float64 `json:"histogramP99Ms"`
	// MeasuredP99Ms is the bench's own p99 of the wave's pools: pool update
	// issued on the hub → its last Machine and Node seen holding it through
	// the spoke's watch.
	MeasuredP99Ms float64 `json:"measuredP99Ms"`
	// HistogramBucket and MeasuredBucket are the histogram buckets the two
	// fall in, as "(lo, hi] s"; BucketsApart how many buckets apart they are.
	HistogramBucket string `json:"histogramBucket"`
	MeasuredBucket  string `json:"measuredBucket"`
	BucketsApart    int    `json:"bucketsApart"`
	// ObjectiveS is the SLO's threshold, the le of config/hub's error_ratio
	// rules; WithinObjective how many of the wave's observed changes its
	// bucket counted (0 if the histogram has no such bound).
	ObjectiveS      float64 `json:"objectiveS"`
	WithinObjective int     `json:"withinObjective"`
}

const propagationMetric = "hub_node_metadata_pool_propagation_seconds"

var leLabel = regexp.MustCompile(`le="([^"]+)"`)

// propagationCheck reads the histogram's increase between two scrapes,
// compares its p99 with the p99 of perPoolMs, and counts the changes within
// the SLO's objective (seconds).
func propagationCheck(before, after Samples, perPoolMs map[string]float64, objective float64) *PropagationCheck {
	immediate := map[string]string{"delivery": "immediate"}
	pc := &PropagationCheck{Pools: len(perPoolMs), ObjectiveS: objective,
		Observed: int(math.Round(after.Sum(propagationMetric+"_count", immediate) - before.Sum(propagationMetric+"_count", immediate)))}
	type bucket struct{ le, count float64 }
	var buckets []bucket
	for k := range after {
		m := leLabel.FindStringSubmatch(k)
		if m == nil || !samplesNamed(k, propagationMetric+"_bucket", immediate) {
			continue
		}
		le, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		buckets = append(buckets, bucket{le, after[k] - before[k]})
		if le == objective {
			pc.WithinObjective = int(math.Round(after[k] - before[k]))
		}
	}
	slices.SortFunc(buckets, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	bounds := make([]float64, len(buckets))
	for i, b := range buckets {
		bounds[i] = b.le
	}
	if len(buckets) == 0 || pc.Observed == 0 || len(perPoolMs) == 0 {
		return pc
	}
	// histogram_quantile: the bucket where the rank falls, linearly
	// interpolated within it (the top finite bound if it falls in +Inf).
	total := buckets[len(buckets)-1].count
	rank := 0.99 * total
	hist := 0
	for hist < len(buckets)-1 && buckets[hist].count < rank {
		hist++
	}
	lo, below := 0.0, 0.0
	if hist > 0 {
		lo, below = buckets[hist-1].le, buckets[hist-1].count
	}
	hi := buckets[hist].le
	p99 := lo
	if !math.IsInf(hi, 1) && buckets[hist].count > below {
		p99 = lo + (hi-lo)*(rank-below)/(buckets[hist].count-below)
	}
	pc.HistogramP99Ms = 1000 * p99

	// The bench's p99, nearest rank.
	ms := make([]float64, 0, len(perPoolMs))
	for _, v := range perPoolMs {
		ms = append(ms, v)
	}
	slices.Sort(ms)
	pc.MeasuredP99Ms = ms[max(0, int(math.Ceil(0.99*float64(len(ms))))-1)]
	meas := bucketOf(bounds, pc.MeasuredP99Ms/1000)
	pc.HistogramBucket, pc.MeasuredBucket = bucketName(bounds, hist), bucketName(bounds, meas)
	pc.BucketsApart = hist - meas
	if pc.BucketsApart < 0 {
		pc.BucketsApart = -pc.BucketsApart
	}
	return pc
}

// samplesNamed reports whether the sample key k is metric name with every
// label of match.
func samplesNamed(k, name string, match map[string]string) bool {
	return Samples{k: 1}.Sum(name, match) == 1
}

// bucketOf is the index of the first bound that holds v.
func bucketOf(bounds []float64, v float64) int {
	for i, b := range bounds {
		if v <= b {
			return i
		}
	}
	return len(bounds) - 1
}

func bucketName(bounds []float64, i int) string {
	lo := 0.0
	if i > 0 {
		lo = bounds[i-1]
	}
	return fmt.Sprintf("(%g, %g] s", lo, bounds[i])
}
