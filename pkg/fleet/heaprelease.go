package fleet

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultHeapReleaseInterval is how often the controller looks for freed heap to return to the
// OS (--heap-release-interval).
const DefaultHeapReleaseInterval = 10 * time.Second

// Free heap is returned to the OS when there is at least heapReleaseMin of it, and more than
// the process would allocate in heapReleaseReuse at its rate over the last heapReleaseWindow:
// more than it could reuse before three of Go's periodic (2-minute) collections. At rest, at a
// steady rate, that never holds: the free heap (what the last collection freed) and what was
// allocated since (what the next one will free) are each at most 2 minutes' worth, 4 in all,
// against 6 (the last 30 s may allocate a third less than the minutes before). A resync is a
// burst, though: every cluster's reconcile at once, then quiet, and a release (one collection)
// may follow it; make bench's at-rest step counts them (heap_releases_total). The window
// spans Prometheus's scrape interval (30 s in config/hub), so that scrapes, each a burst of
// allocation at thousands of clusters, count in the rate; a burst leaves the window 30 s after
// it ends, and its garbage is returned then. The floor only spares a collection for a few
// pages; it is small because a small controller's whole cost is a few MiB (10 connected spokes
// of 100 Nodes: 6 MiB of live heap).
const (
	heapReleaseMin    = 1 << 20
	heapReleaseReuse  = 6 * time.Minute
	heapReleaseWindow = 30 * time.Second
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
	read     func() (free, allocated uint64) // free heap (with garbage not yet collected), bytes allocated since start
	release  func()
	releases prometheus.Counter // heap_releases_total

	allocs []uint64 // bytes allocated since start, read at the last ticks: heapReleaseWindow's worth
}

// newHeapReleaser returns a releaser counting its releases in releases (heap_releases_total).
func newHeapReleaser(interval time.Duration, log logr.Logger, releases prometheus.Counter) *heapReleaser {
	return &heapReleaser{interval: interval, log: log, read: readHeap, release: debug.FreeOSMemory, releases: releases}
}

// NeedLeaderElection is false: a standby's memory is the pod's too.
func (h *heapReleaser) NeedLeaderElection() bool { return false }

func (h *heapReleaser) Start(ctx context.Context) error {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	_, allocated := h.read()
	h.allocs = append(h.allocs, allocated)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		h.tick()
	}
}

// tick returns free heap to the OS if releasable says so, over the allocation of the window
// that ends now (or of every tick so far, before there have been a window's worth).
func (h *heapReleaser) tick() {
	free, allocated := h.read()
	ticks := max(1, int((heapReleaseWindow+h.interval-1)/h.interval))
	h.allocs = append(h.allocs, allocated)
	if len(h.allocs) > ticks+1 {
		h.allocs = append(h.allocs[:0], h.allocs[len(h.allocs)-ticks-1:]...)
	}
	window := time.Duration(len(h.allocs)-1) * h.interval
	if !releasable(free, allocated-h.allocs[0], window) {
		return
	}
	start := time.Now()
	h.release()
	h.releases.Inc()
	after, _ := h.read()
	h.log.V(1).Info("returned free heap to the OS", "freeMiB", free>>20, "freeAfterMiB", after>>20, "took", time.Since(start).Round(time.Millisecond))
}

// releasable says whether free heap is worth returning, with allocated bytes allocated over the
// last window.
func releasable(free, allocated uint64, window time.Duration) bool {
	if window <= 0 {
		return false
	}
	reuse := float64(allocated) * float64(heapReleaseReuse) / float64(window)
	return free >= heapReleaseMin && float64(free) > reuse
}

var heapSamples = []rtmetrics.Sample{
	{Name: "/memory/classes/heap/free:bytes"},
	{Name: "/gc/heap/allocs:bytes"},
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/gc/heap/live:bytes"},
}

// readHeap reads about how much heap a release would return to the OS, and the bytes allocated
// since the process started, from runtime/metrics: no stop of the world, unlike ReadMemStats.
// The estimate is the free heap (freed, not returned) and what was allocated since the last
// collection (the heap's objects less the live heap that collection marked), which
// debug.FreeOSMemory collects first. It is an upper bound: some of what was allocated since is
// still live, and garbage in a span that also holds a live object stays there as a free slot;
// once a burst is over it is mostly garbage in spans of its own. Without it, a burst's last
// garbage (allocated after its last collection, which at rest is up to 2 minutes away) stayed
// in the RSS until a collection freed it and the next tick saw it: 8.6 MiB of a 10-spoke
// controller's RSS 45 s after its start, measured without it.
func readHeap() (free, allocated uint64) {
	s := make([]rtmetrics.Sample, len(heapSamples))
	copy(s, heapSamples)
	rtmetrics.Read(s)
	free = s[0].Value.Uint64()
	if objects, live := s[2].Value.Uint64(), s[3].Value.Uint64(); objects > live {
		free += objects - live
	}
	return free, s[1].Value.Uint64()
}
