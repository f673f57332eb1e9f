package bench

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// Share is one kind of work (CPU) or owner (heap, goroutines) in a profile, in the unit the
// breakdown says: % of one core, MiB, or goroutines.
type Share struct {
	What  string  `json:"what"`
	Value float64 `json:"value"`
}

// rule names a sample by a frame of its stack: the first rule with a frame in the stack wins.
type rule struct{ frame, what string }

// cpuRules name a CPU sample by the work its goroutine does.
var cpuRules = []rule{
	{"runtime.gcBgMarkWorker", "GC (background mark)"},
	{"runtime.bgsweep", "GC (sweeping)"},
	{"runtime.bgscavenge", "returning memory to the OS"},
	{"spokecache.(*kindLoop)", "spoke watches (decoding events, records)"},
	{"remote.(*Manager).monitor", "spoke connection monitors"},
	{"http2.(*ClientConn).Ping", "HTTP/2 health-check pings"},
	{"http2.(*ClientConn).readLoop", "HTTP/2 connection readers (frames, pings)"},
	{"http2.(*clientStream).doRequest", "HTTP/2 request writers"},
	{"pkg/fleet.", "reconciles"},
	{"controller-runtime/pkg/internal/controller", "reconciles"},
	{"promhttp", "serving /metrics"},
	{"leaderelection", "leader election"},
	{"client-go/tools/cache", "hub informers"},
	{"net/http.(*conn).serve", "serving HTTP (pprof, memstats)"},
	{"runtime.schedule", "Go scheduler"},
	{"runtime.sysmon", "Go scheduler"},
}

// heapRules name a live allocation by what holds it, checked from the allocating frame up.
var heapRules = []rule{
	{"pkg/remote/spokecache.compact", "spoke records"},
	{"pkg/remote/spokecache.(*kindStore)", "spoke records"},
	{"unique.Make", "spoke records (interned labels)"},
	{"crypto/tls", "TLS connections"},
	{"crypto/x509", "TLS certificates (kubeconfigs' CAs)"},
	{"x/net/http2", "HTTP/2 connections (framers, header tables, streams)"},
	{"net/http.", "HTTP transports"},
	{"bufio.", "HTTP/2 connections (framers, header tables, streams)"},
	{"runtime/serializer/streaming", "watch stream decoders"},
	{"encoding/json.(*Decoder)", "watch stream decoders"},
	{"util/framer", "watch stream decoders"},
	{"pkg/remote/spokecache.(*kindLoop)", "spoke list-and-watch loops (store indexes, events being decoded)"},
	{"pkg/remote/spokecache.New", "spoke clients (REST clients, rate limiters)"},
	{"pkg/remote.newConn", "spoke clients (REST clients, rate limiters)"},
	{"client-go/rest", "spoke clients (REST clients, rate limiters)"},
	{"client-go/transport", "spoke clients (REST clients, rate limiters)"},
	{"controller-runtime/pkg/cache", "hub caches"},
	{"client-go/tools/cache", "hub caches"},
	{"pkg/fleet.", "reconciler state"},
	{"controller-runtime/pkg/internal/controller", "reconciler state"},
	{"runtime.systemstack", "goroutines (the runtime's records of them)"},
	{"runtime.malg", "goroutines (the runtime's records of them)"},
	{"prometheus", "metrics"},
	{"go.uber.org/zap", "logging"},
}

// goroutineRules name a goroutine by what it runs.
var goroutineRules = []rule{
	{"spokecache.(*kindLoop)", "spoke list-and-watch loops"},
	{"http2.(*clientStream).doRequest", "HTTP/2 stream writers (one per open watch)"},
	{"http2.(*ClientConn).readLoop", "HTTP/2 connection readers"},
	{"remote.(*Manager).run", "spoke connection workers and monitors"},
	{"tools/cache.(*Reflector)", "client-go Reflectors"},
	{"watch.(*StreamWatcher)", "client-go watch stream readers"},
	{"controller-runtime", "controller-runtime (workers, sources, hub caches)"},
	{"client-go/tools/cache", "hub informers"},
}

// cpuBreakdown is a CPU profile by kind of work, in % of one core over its duration.
func cpuBreakdown(path string) ([]Share, error) {
	return breakdown(path, "cpu", cpuRules, func(v int64, p *profile.Profile) float64 {
		return 100 * float64(v) / float64(p.DurationNanos)
	})
}

// heapBreakdown is a heap profile's live bytes by holder, in MiB.
func heapBreakdown(path string) ([]Share, error) {
	return breakdown(path, "inuse_space", heapRules, func(v int64, _ *profile.Profile) float64 { return float64(v) / (1 << 20) })
}

// goroutineBreakdown is a goroutine profile's goroutines by what they run.
func goroutineBreakdown(path string) ([]Share, error) {
	return breakdown(path, "goroutine", goroutineRules, func(v int64, _ *profile.Profile) float64 { return float64(v) })
}

// breakdown sums a profile's samples of sampleType by rule, largest first, in the unit scale
// gives.
func breakdown(path, sampleType string, rules []rule, scale func(int64, *profile.Profile) float64) ([]Share, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	p, err := profile.Parse(fh)
	if err != nil {
		return nil, err
	}
	idx := len(p.SampleType) - 1
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx = i
		}
	}
	if sampleType == "cpu" && p.DurationNanos <= 0 {
		return nil, nil
	}
	sums := map[string]int64{}
	for _, s := range p.Sample {
		sums[nameOf(s, rules)] += s.Value[idx]
	}
	out := make([]Share, 0, len(sums))
	for what, v := range sums {
		out = append(out, Share{What: what, Value: scale(v, p)})
	}
	slices.SortFunc(out, func(a, b Share) int {
		if c := cmp.Compare(b.Value, a.Value); c != 0 {
			return c
		}
		return strings.Compare(a.What, b.What)
	})
	return out, nil
}

// nameOf is the first rule with a frame in s's stack (leaf to root), else the function s's
// goroutine was started with.
func nameOf(s *profile.Sample, rules []rule) string {
	var frames []string
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function != nil {
				frames = append(frames, l.Function.Name)
			}
		}
	}
	for _, r := range rules {
		for _, f := range frames {
			if strings.Contains(f, r.frame) {
				return r.what
			}
		}
	}
	for i := len(frames) - 1; i >= 0; i-- {
		if frames[i] != "runtime.goexit" {
			return frames[i]
		}
	}
	return "unknown"
}

// shares prints the shares at or above min as "what value unit, ...", and the rest as one.
func shares(ss []Share, format string, min float64) string {
	var parts []string
	var rest float64
	for _, s := range ss {
		if s.Value >= min {
			parts = append(parts, s.What+" "+fmt.Sprintf(format, s.Value))
		} else {
			rest += s.Value
		}
	}
	if rest > 0 {
		parts = append(parts, "other "+fmt.Sprintf(format, rest))
	}
	return strings.Join(parts, ", ")
}
