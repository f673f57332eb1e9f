package main

import (
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

var (
	kept     [][]byte
	keptPtrs []*pointerPair
)

// pointerPair is a 16-byte object with a pointer, and pointerSix a 48-byte one: their spans
// keep a pointer bitmap and Green Tea's mark bits at their end, which 16 bytes divide and 48
// do not (a 48-byte span's first slot past its last object starts before its reserved tail).
type pointerPair struct {
	p *int
	n int
}

type pointerSix struct {
	p *int
	n [5]int
}

var (
	keptSixes []*pointerSix
	pointee   int // what their pointers point at
)

//go:noinline
func allocateForTheTest() {
	for range 40 {
		kept = append(kept, make([]byte, 100)) // 40 objects of the 112-byte class: part of one span
	}
	kept = append(kept, make([]byte, 50000)) // a large object: a span of its own, 7 pages
}

//go:noinline
func allocatePointerPairs() {
	for i := range 2000 { // 32,000 bytes: spans of 16-byte objects, some filled to their end
		keptPtrs = append(keptPtrs, &pointerPair{p: &pointee, n: i})
	}
	for i := range 2000 { // 96,000 bytes of 48-byte objects
		keptSixes = append(keptSixes, &pointerSix{p: &pointee, n: [5]int{i}})
	}
}

// The spans found in a dump of this process add up to MemStats.HeapInuse, and the objects
// allocated here are found, named by their allocation site, with their span's free slots.
func TestReadsADumpOfThisProcess(t *testing.T) {
	classes, err := sizeClasses()
	if err != nil {
		t.Skip("no Go source tree:", err)
	}
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	kept = make([][]byte, 0, 41)
	keptPtrs = make([]*pointerPair, 0, 2000)
	keptSixes = make([]*pointerSix, 0, 2000)
	runtime.MemProfileRate = 1
	before := summaryOfThisProcess(t, classes)
	allocateForTheTest()
	allocatePointerPairs()
	s := summaryOfThisProcess(t, classes)
	runtime.KeepAlive(kept)
	runtime.KeepAlive(keptPtrs)
	runtime.KeepAlive(keptSixes)
	// Were slotsOf's tails too short, the slots past the last object of each new span of
	// 16- and 48-byte objects would be counted as objects without a sample: a dozen or more.
	if n := s.unsampled - before.unsampled; n >= 5 {
		t.Errorf("%d more objects without an allocation sample after allocating, all sampled", n)
	}
	if s.spans != s.heapInuse || s.spans == 0 {
		t.Errorf("spans found %.0f bytes, MemStats.HeapInuse %.0f", s.spans, s.heapInuse)
	}
	var here usage
	for site, u := range s.bySite {
		if strings.Contains(site, "allocateForTheTest") {
			here.live, here.free = here.live+u.live, here.free+u.free
		}
	}
	// The dump lists the slots of a span's reserved tail as objects, without an allocation
	// sample: they are found, and not counted as anybody's objects.
	if s.metadata == 0 || s.metadata > s.spans/20 {
		t.Errorf("span tails: %.0f bytes of %.0f in spans; want some, and few", s.metadata, s.spans)
	}
	if pairs := s.bySite[siteWith(s, "allocatePointerPairs")].live; pairs != 2000*16+2000*48 {
		t.Errorf("live bytes of the pointer pairs and sixes: %.0f, want %d", pairs, 2000*16+2000*48)
	}
	// Were slotsOf's tails too long, objects allocated here would fall in them.
	if s.sampledTail != 0 {
		t.Errorf("%d objects with an allocation sample taken for span tails", s.sampledTail)
	}
	if want := 40.0*112 + 7*8192; here.live != want {
		t.Errorf("live bytes allocated here: %.0f, want %.0f", here.live, want)
	}
	if here.free <= 0 || here.free >= 2*8192 { // the 40 small ones may start in a span in use
		t.Errorf("free bytes beside them: %.0f, want some, less than two pages", here.free)
	}
}

// summaryOfThisProcess collects, dumps this process's heap and summarizes the dump.
func summaryOfThisProcess(t *testing.T, classes map[uint64]uint64) *summary {
	t.Helper()
	runtime.GC()
	path := filepath.Join(t.TempDir(), "dump")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	debug.WriteHeapDump(f.Fd())
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := read(path)
	if err != nil {
		t.Fatal(err)
	}
	return d.summarize(classes)
}

// siteWith returns the one allocation site of s that names fn.
func siteWith(s *summary, fn string) string {
	for site := range s.bySite {
		if strings.Contains(site, fn) {
			return site
		}
	}
	return ""
}

// slotsOf agrees with the runtime's initSpan (Go 1.26, Green Tea) on a few classes.
func TestSlotsOf(t *testing.T) {
	for _, c := range []struct {
		size uint64
		scan bool
		want uint64
	}{
		{8, false, 1024}, // no reserve: no mark bits below 16 bytes, no bitmap without pointers
		{8, true, 1008},  // a 128-byte bitmap
		{16, true, 496},  // 128 bytes of mark bits and a 128-byte bitmap
		{48, true, 165},  // the same 256 bytes, and 16 more that no object fits in
		{144, false, 56}, // mark bits only
		{1024, true, 8},  // over 512 bytes: nothing kept at the end
	} {
		if got := slotsOf(c.size, 8192, c.scan); got != c.want {
			t.Errorf("slotsOf(%d, 8192, %v) = %d, want %d", c.size, c.scan, got, c.want)
		}
	}
}

// The difference of two dumps is taken key by key, a key missing on one side counting zero.
func TestMinus(t *testing.T) {
	base := &summary{heapInuse: 100, spans: 100, shared: 10,
		bySite: map[string]usage{"a": {10, 20}, "gone": {4, 4}}, byOwner: map[string]usage{"o": {10, 20}},
		soleOwner: map[string]float64{"o": 8, "gone": 2}}
	s := &summary{heapInuse: 300, spans: 300, shared: 30,
		bySite: map[string]usage{"a": {30, 40}, "new": {6, 2}}, byOwner: map[string]usage{"o": {30, 60}},
		soleOwner: map[string]float64{"o": 28}}
	d := s.minus(base, 2)
	if d.heapInuse != 100 || d.spans != 100 || d.shared != 10 {
		t.Errorf("totals %v %v %v, want 100 100 10", d.heapInuse, d.spans, d.shared)
	}
	if want := map[string]usage{"a": {10, 10}, "gone": {-2, -2}, "new": {3, 1}}; !maps.Equal(d.bySite, want) {
		t.Errorf("bySite %v, want %v", d.bySite, want)
	}
	if want := map[string]float64{"o": 10, "gone": -1}; !maps.Equal(d.soleOwner, want) {
		t.Errorf("soleOwner %v, want %v", d.soleOwner, want)
	}
}
