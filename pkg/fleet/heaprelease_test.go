package fleet

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestReleasable(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		free, allocated uint64
		want            bool
	}{
		{213 * mib, 0, true},                         // at rest after a start
		{213 * mib, 5 * mib, true},                   // at rest, allocating a little
		{213 * mib, 6 * mib, false},                  // 36 intervals (6 minutes) would reuse it all
		{mib - 1, 0, false},                          // too little to be worth a collection
		{mib, 0, true},                               //
		{6 * mib, 64 << 10, true},                    // 10 spokes after their adoption, at rest
		{6 * mib, 256 << 10, false},                  // the same, allocating 26 KiB/s
		{600 * mib, 2048 * mib, false},               // a burst goes on
		{heapReleaseMin * 36, heapReleaseMin, false}, // exactly reusable
	} {
		if got := releasable(c.free, c.allocated, 10*time.Second); got != c.want {
			t.Errorf("releasable(%d MiB free, %d MiB allocated) = %v, want %v", c.free/mib, c.allocated/mib, got, c.want)
		}
	}
	if releasable(600*mib, 0, 0) {
		t.Error("releasable with no window yet")
	}
}

// The releaser returns the heap a burst left, on the real runtime, once the burst has left its
// window; while it allocates fast, and while the burst is in the window, it returns nothing.
// (That it does not fire again at rest, where a collection frees less than the process
// allocates in the reuse window, is releasable's, above: here the other tests of the package
// allocate meanwhile.)
func TestHeapReleaserReturnsFreeHeap(t *testing.T) {
	releases := 0
	counted := prometheus.NewCounter(prometheus.CounterOpts{Name: "releases"})
	h := &heapReleaser{interval: 10 * time.Second, log: logr.Discard(), read: readHeap, release: func() { releases++; debug.FreeOSMemory() }, releases: counted}
	burst := func() {
		garbage := make([][]byte, 256)
		for i := range garbage {
			garbage[i] = make([]byte, 1<<20)
		}
		runtime.KeepAlive(garbage)
		runtime.GC()
	}

	_, before := readHeap()
	h.allocs = []uint64{before}
	// The runtime's scavenger may return a burst's heap itself before the
	// test looks (seen once on a loaded 2-core machine): burst again, up to
	// three times, until the heap holds enough free for the releaser to
	// return.
	var free uint64
	for range 3 {
		burst()
		if free, _ = readHeap(); free >= 64<<20 {
			break
		}
	}
	h.tick() // the bursts count as this interval's allocations: they may be reused soon
	if releases != 0 {
		t.Fatalf("released while allocating fast (%d)", releases)
	}
	if free < 64<<20 {
		t.Fatalf("free heap after three 256 MiB bursts: %d MiB, want at least 64", free>>20)
	}
	// Quiet since: the burst leaves the 30 s window (3 ticks) at the third tick.
	for i := 1; i <= 3; i++ {
		h.tick()
		if want := map[bool]int{true: 1, false: 0}[i == 3]; releases != want {
			t.Fatalf("releases = %d after %d quiet ticks with %d MiB free, want %d", releases, i, free>>20, want)
		}
	}
	if after, _ := readHeap(); after > free/8 {
		t.Errorf("free heap after the release: %d MiB of %d, want at most an eighth", after>>20, free>>20)
	}
	if n := testutil.ToFloat64(counted); n != 1 {
		t.Errorf("heap_releases_total = %v, want 1", n)
	}
}

// Garbage that no collection has seen yet counts as free heap: a burst whose last collection
// came before its end leaves its tail there, and the release (a collection first) returns it.
// Collections are off while the garbage is made, so none sees it before the releaser does.
func TestHeapReleaserCountsGarbageNotYetCollected(t *testing.T) {
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	releases := 0
	h := &heapReleaser{interval: 10 * time.Second, log: logr.Discard(), read: readHeap,
		release:  func() { releases++; debug.FreeOSMemory() },
		releases: prometheus.NewCounter(prometheus.CounterOpts{Name: "releases"})}
	_, before := readHeap()
	h.allocs = []uint64{before}
	garbage := make([][]byte, 128)
	for i := range garbage {
		garbage[i] = make([]byte, 1<<20)
	}
	runtime.KeepAlive(garbage) // garbage from here on
	h.tick()                   // the burst's interval
	free, _ := readHeap()
	if free < 100<<20 {
		t.Fatalf("free heap with 128 MiB of garbage not yet collected: %d MiB, want at least 100", free>>20)
	}
	for i := 1; i <= 3; i++ {
		h.tick()
	}
	if releases != 1 {
		t.Fatalf("releases = %d after 3 quiet ticks with %d MiB of garbage, want 1", releases, free>>20)
	}
	if after, _ := readHeap(); after > free/8 {
		t.Errorf("free heap after the release: %d MiB of %d, want at most an eighth", after>>20, free>>20)
	}
}
