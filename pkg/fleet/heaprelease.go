package fleet

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// DefaultHeapReleaseInterval is how often the controller looks for freed heap to return to the
// OS (--heap-release-interval).
const DefaultHeapReleaseInterval = 10 * time.Second

// Free heap is returned to the OS when there is at least heapReleaseMin of it, and more than
// the process would allocate in heapReleaseReuse at the rate of the last interval: more than
// it could reuse before two of Go's periodic (2-minute) collections. At rest that never holds
// twice: a collection frees at most what was allocated since the one before, at most 2
// minutes' worth. So the floor only spares a collection for a few pages; it is small because
// a small controller's whole cost is a few MiB (10 connected spokes of 100 Nodes: 6 MiB of
// live heap).
const (
	heapReleaseMin   = 1 << 20
	heapReleaseReuse = 4 * time.Minute
)

// heapReleaser returns freed heap to the OS once the process has gone quiet after a burst of
// work: the lists and decoding of a (re)start, a wave of reconnects or of writes. The Go
// runtime's scavenger keeps freed heap up to the next GC goal (twice the live heap with
// GOGC=100) on the bet that the heap grows back to it; a controller at rest allocates little,
// so it never does, and the burst's garbage stays in the RSS (213 of 869 MiB with 2,000 clusters
// in make bench before this; 0.57 of the 1.50 MiB of RSS per connected 100-Node spoke, with the
// 64 MiB floor this had first). debug.FreeOSMemory costs one collection: it is called only when
// the free heap is large, and more than the process could reuse soon at the rate it allocates,
// so never while a burst goes on and about once after it. Its peak is the same: the limit the
// pod needs does not move, its RSS at rest does.
type heapReleaser struct {
	interval time.Duration
	log      logr.Logger
	read     func() (free, allocated uint64) // free heap, bytes allocated since start
	release  func()
	releases prometheus.Counter // heap_releases_total
}

var (
	heapReleasesOnce sync.Once
	heapReleases     prometheus.Counter
)

func newHeapReleaser(interval time.Duration, log logr.Logger) *heapReleaser {
	heapReleasesOnce.Do(func() {
		heapReleases = prometheus.NewCounter(prometheus.CounterOpts{Name: metricPrefix + "heap_releases_total",
			Help: "Times freed heap was returned to the OS (one forced collection each) once the process had gone quiet after a burst of work."})
		metrics.Registry.MustRegister(heapReleases)
	})
	return &heapReleaser{interval: interval, log: log, read: readHeap, release: debug.FreeOSMemory, releases: heapReleases}
}

// NeedLeaderElection is false: a standby's memory is the pod's too.
func (h *heapReleaser) NeedLeaderElection() bool { return false }

func (h *heapReleaser) Start(ctx context.Context) error {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	_, last := h.read()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		last = h.tick(last)
	}
}

// tick returns free heap to the OS if releasable says so, and the allocation count it read.
func (h *heapReleaser) tick(lastAllocated uint64) uint64 {
	free, allocated := h.read()
	if !releasable(free, allocated-lastAllocated, h.interval) {
		return allocated
	}
	start := time.Now()
	h.release()
	h.releases.Inc()
	after, allocated := h.read()
	h.log.V(1).Info("returned free heap to the OS", "freeMiB", free>>20, "freeAfterMiB", after>>20, "took", time.Since(start).Round(time.Millisecond))
	return allocated
}

// releasable says whether free heap is worth returning, with allocated bytes allocated over the
// last interval.
func releasable(free, allocated uint64, interval time.Duration) bool {
	reuse := float64(allocated) * float64(heapReleaseReuse) / float64(interval)
	return free >= heapReleaseMin && float64(free) > reuse
}

var heapSamples = []rtmetrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/heap/allocs:bytes"}}

// readHeap reads the free heap (freed, not returned to the OS) and the bytes allocated since
// the process started, from runtime/metrics: no stop of the world, unlike ReadMemStats.
func readHeap() (free, allocated uint64) {
	s := make([]rtmetrics.Sample, len(heapSamples))
	copy(s, heapSamples)
	rtmetrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}
