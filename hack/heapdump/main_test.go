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

// pointerPair is a 16-byte object with a pointer: its spans keep a pointer bitmap and Green
// Tea's mark bits at their end.
type pointerPair struct {
	p *int
	n int
}

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
		keptPtrs = append(keptPtrs, &pointerPair{n: i})
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
	runtime.MemProfileRate = 1
	allocateForTheTest()
	allocatePointerPairs()
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
	runtime.KeepAlive(kept)
	runtime.KeepAlive(keptPtrs)

	d, err := read(path)
	if err != nil {
		t.Fatal(err)
	}
	s := d.summarize(classes)
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
	if pairs := s.bySite[siteWith(s, "allocatePointerPairs")].live; pairs != 2000*16 {
		t.Errorf("live bytes of the pointer pairs: %.0f, want %d", pairs, 2000*16)
	}
	if want := 40.0*112 + 7*8192; here.live != want {
		t.Errorf("live bytes allocated here: %.0f, want %.0f", here.live, want)
	}
	if here.free <= 0 || here.free >= 2*8192 { // the 40 small ones may start in a span in use
		t.Errorf("free bytes beside them: %.0f, want some, less than two pages", here.free)
	}
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
