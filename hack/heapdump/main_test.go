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

var kept [][]byte

//go:noinline
func allocateForTheTest() {
	for range 40 {
		kept = append(kept, make([]byte, 100)) // 40 objects of the 112-byte class: part of one span
	}
	kept = append(kept, make([]byte, 50000)) // a large object: a span of its own, 7 pages
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
	runtime.MemProfileRate = 1
	allocateForTheTest()
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
	if want := 40.0*112 + 7*8192; here.live != want {
		t.Errorf("live bytes allocated here: %.0f, want %.0f", here.live, want)
	}
	if here.free <= 0 || here.free >= 2*8192 { // the 40 small ones may start in a span in use
		t.Errorf("free bytes beside them: %.0f, want some, less than two pages", here.free)
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
