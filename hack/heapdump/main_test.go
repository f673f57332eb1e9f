package main

import (
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
