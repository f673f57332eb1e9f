package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/pprof/profile"
)

func TestCPUBreakdown(t *testing.T) {
	fn := func(id uint64, name string) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: &profile.Function{ID: id, Name: name}}}}
	}
	goexit, gc, loop, decode, other := fn(1, "runtime.goexit"), fn(2, "runtime.gcBgMarkWorker"), fn(3, "github.com/openshift/hub-node-metadata/pkg/remote/spokecache.(*kindLoop).run"), fn(4, "encoding/json.checkValid"), fn(5, "example.com/x.poll")
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		DurationNanos: 1e9,
		Location:      []*profile.Location{goexit, gc, loop, decode, other},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{gc, goexit}, Value: []int64{1, 10e6}},
			{Location: []*profile.Location{decode, loop, goexit}, Value: []int64{2, 20e6}},
			{Location: []*profile.Location{loop, goexit}, Value: []int64{1, 10e6}},
			{Location: []*profile.Location{decode, other, goexit}, Value: []int64{1, 5e6}},
		},
	}
	for _, l := range p.Location {
		p.Function = append(p.Function, l.Line[0].Function)
	}
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(fh); err != nil {
		t.Fatal(err)
	}
	_ = fh.Close()
	got, err := cpuBreakdown(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Share{{"spoke watches (decoding events, records)", 3}, {"GC (background mark)", 1}, {"example.com/x.poll", 0.5}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("breakdown (-want +got):\n%s", diff)
	}
}

func TestCostLine(t *testing.T) {
	var pts []Point
	for _, n := range []float64{10, 50, 100, 250} {
		pts = append(pts, Point{Dimension: "nodes", Wave: Wave{NodesPerSpoke: n}, PerSpoke: perSpoke{RSSMiB: 0.25 + 0.004*n, HeapMiB: 0.1 + 0.002*n, Goroutines: 9}})
	}
	c, n := costLine(pts)
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	if !near(c.RSSMiB, 0.25) || !near(n.RSSMiB, 0.004) || !near(c.HeapMiB, 0.1) || !near(n.HeapMiB, 0.002) || !near(c.Goroutines, 9) || !near(n.Goroutines, 0) {
		t.Errorf("costLine = per connection %+v, per Node %+v", c, n)
	}
	if c, n := costLine(pts[:1]); c != (perSpoke{}) || n != (perSpoke{}) {
		t.Errorf("one point gave a line: %+v %+v", c, n)
	}
}
