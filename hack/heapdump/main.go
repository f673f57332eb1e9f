// Command heapdump tells where a controller's heap in use goes: the live objects and the free
// slots of the spans that hold them, by what allocated the objects. Go's heap profile counts only
// live objects; a span (8 KiB or more, of one size class) with one live object is in use whole,
// and the heap in use of a small controller is about twice its live heap.
//
// It reads heap dumps (runtime/debug.WriteHeapDump) of a process run with
// GODEBUG=memprofilerate=1, so that every object has its allocation stack. make bench's
// controller writes one at each memory measurement into $BENCH_HEAPDUMP_DIR when that is set:
//
//	_out/bench/bench -controller-env GODEBUG=memprofilerate=1,BENCH_HEAPDUMP_DIR=/tmp/dumps ...
//	go run ./hack/heapdump -per 10 /tmp/dumps/<0 spokes> /tmp/dumps/<10 spokes>
//
// With two dumps it prints the second less the first, divided by -per. Not part of the
// controller, nor of make bench: profiling every allocation changes what it measures.
package main

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	per := flag.Float64("per", 1, "divide the difference of two dumps by this (e.g. the spokes added)")
	top := flag.Int("top", 25, "allocation sites to list")
	flag.Parse()
	if flag.NArg() < 1 || flag.NArg() > 2 {
		fmt.Fprintln(os.Stderr, "usage: heapdump [-per N] [-top K] [base.dump] dump")
		os.Exit(2)
	}
	classes, err := sizeClasses()
	if err != nil {
		fail(err)
	}
	var dumps []*summary
	for _, path := range flag.Args() {
		d, err := read(path)
		if err != nil {
			fail(fmt.Errorf("%s: %w", path, err))
		}
		dumps = append(dumps, d.summarize(classes))
	}
	s := dumps[len(dumps)-1]
	if len(dumps) == 2 {
		s = s.minus(dumps[0], *per)
		fmt.Printf("difference of the two dumps, divided by %g\n", *per)
	}
	s.print(*top)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "heapdump:", err)
	os.Exit(1)
}

// sizeClasses reads the runtime's size classes (object size → span size) from the Go source
// tree this command runs with.
func sizeClasses() (map[uint64]uint64, error) {
	root, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return nil, err
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), "src/internal/runtime/gc/sizeclasses.go"))
	if err != nil {
		return nil, err
	}
	out := map[uint64]uint64{}
	for _, m := range regexp.MustCompile(`(?m)^//\s+\d+\s+(\d+)\s+(\d+)\s+\d+`).FindAllStringSubmatch(string(src), -1) {
		size, _ := strconv.ParseUint(m[1], 10, 64)
		span, _ := strconv.ParseUint(m[2], 10, 64)
		out[size] = span
	}
	if len(out) < 60 {
		return nil, fmt.Errorf("found %d size classes in the Go source", len(out))
	}
	return out, nil
}

type object struct {
	addr, size uint64
	ptrs       bool // the dump lists pointer fields in it
}

type dump struct {
	objects   []object          // in the dump's order: span by span
	sites     map[uint64]string // memory profile bucket → allocation site
	sampled   map[uint64]uint64 // object address → bucket
	heapInuse uint64
}

// read parses the heap dump format of runtime/heapdump.go ("go1.7 heap dump"), keeping the
// objects, the memory profile's buckets and samples, and MemStats.HeapInuse.
func read(path string) (*dump, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &reader{r: bufio.NewReaderSize(f, 1<<20)}
	header := make([]byte, 16)
	if _, err := io.ReadFull(r.r, header); err != nil {
		return nil, err
	}
	if string(header) != "go1.7 heap dump\n" {
		return nil, fmt.Errorf("not a heap dump (it starts %q)", header)
	}
	d := &dump{sites: map[uint64]string{}, sampled: map[uint64]uint64{}}
	for r.err == nil {
		switch tag := r.uint(); tag {
		case 0: // end
			return d, nil
		case 1: // object: address, contents, pointer fields
			addr := r.uint()
			size := r.skipBytes()
			d.objects = append(d.objects, object{addr, size, r.fields() > 0})
		case 2: // other root: description, address
			r.skipBytes()
			r.uint()
		case 3: // type: address, size, name, indirect
			r.uints(2)
			r.skipBytes()
			r.uint()
		case 4: // goroutine
			r.uints(8)
			r.skipBytes()
			r.uints(4)
		case 5: // stack frame
			r.uints(3)
			r.skipBytes()
			r.uints(3)
			r.skipBytes()
			r.fields()
		case 6: // params
			r.uints(4)
			r.skipBytes()
			r.skipBytes()
			r.uint()
		case 7, 11: // finalizer, queued finalizer
			r.uints(5)
		case 8: // itab
			r.uints(2)
		case 9: // OS thread
			r.uints(3)
		case 10: // MemStats, in its field order, then PauseNs and NumGC
			stats := r.uints(24)
			d.heapInuse = stats[9]
			r.uints(257)
		case 12, 13: // data, bss
			r.uint()
			r.skipBytes()
			r.fields()
		case 14: // defer
			r.uints(7)
		case 15: // panic
			r.uints(6)
		case 16: // memory profile bucket: address, size, frames, allocs, frees
			bucket := r.uint()
			r.uint()
			var frames []string
			for n := r.uint(); n > 0 && r.err == nil; n-- {
				frames = append(frames, r.string())
				r.skipBytes() // file
				r.uint()      // line
			}
			r.uints(2)
			d.sites[bucket] = site(frames)
		case 17: // allocation sample: object, bucket
			addr := r.uint()
			d.sampled[addr] = r.uint()
		default:
			return nil, fmt.Errorf("unknown record %d", tag)
		}
	}
	return nil, r.err
}

type reader struct {
	r   *bufio.Reader
	err error
}

func (r *reader) uint() uint64 {
	if r.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(r.r)
	r.err = err
	return v
}

func (r *reader) uints(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = r.uint()
	}
	return out
}

func (r *reader) skipBytes() uint64 {
	n := r.uint()
	if r.err == nil {
		_, r.err = r.r.Discard(int(n))
	}
	return n
}

func (r *reader) string() string {
	n := r.uint()
	b := make([]byte, n)
	if r.err == nil {
		_, r.err = io.ReadFull(r.r, b)
	}
	return string(b)
}

// fields skips a field list (kind, offset pairs up to kind 0) and returns its length.
func (r *reader) fields() int {
	n := 0
	for r.err == nil && r.uint() != 0 {
		r.uint()
		n++
	}
	return n
}

// generic matches the frames of the runtime and of the decoding, copying and collection code
// every owner calls.
var generic = regexp.MustCompile(`^(runtime\.|reflect\.|strings\.|bytes\.|encoding/json\.|sync\.|internal/|maps\.|slices\.|unique\.|strconv\.|fmt\.|bufio\.|io\.|k8s\.io/apimachinery/pkg/runtime\.|google\.golang\.org/protobuf|sigs\.k8s\.io/json)`)

// site names an allocation by its first frames outside the runtime and the generic decoding,
// copying and collection code every owner calls.
func site(frames []string) string {
	var out []string
	for _, f := range frames {
		if len(out) == 0 && generic.MatchString(f) {
			continue
		}
		out = append(out, f)
		if len(out) == 2 {
			break
		}
	}
	if len(out) == 0 && len(frames) > 0 {
		out = frames[:1]
	}
	return strings.Join(out, " < ")
}

// owners sorts allocation sites into what holds the memory, by the packages on their stacks.
var owners = []struct{ name, pattern string }{
	{"spoke records (pkg/remote: compact)", `hub-node-metadata/pkg/remote/spokecache\.(compact|pairsOf|internTaints|\(\*record\)|decodeMachine)`},
	{"spoke connections (TLS, HTTP/2, sockets)", `crypto/|golang\.org/x/net/http2|net/http\.|^net\.|vendor/golang\.org`},
	{"spoke clients and loops (pkg/remote)", `hub-node-metadata/pkg/remote(/spokecache)?\.|k8s\.io/client-go/rest\.|k8s\.io/client-go/metadata`},
	{"hub caches and clients", `k8s\.io/client-go/tools/cache|controller-runtime/pkg/cache|k8s\.io/apimachinery/pkg/runtime/serializer|k8s\.io/client-go/`},
	{"metrics", `prometheus`},
	{"controllers (pkg/fleet, controller-runtime)", `hub-node-metadata/pkg/fleet|controller-runtime`},
	{"start-up (schemes, init)", `\.init|addKnownTypes|AddToScheme|regexp\.|zap`},
}

var ownerPatterns = func() []*regexp.Regexp {
	var out []*regexp.Regexp
	for _, o := range owners {
		out = append(out, regexp.MustCompile(o.pattern))
	}
	return out
}()

func ownerOf(site string) string {
	if site == "" {
		return "no allocation sample"
	}
	for i, p := range ownerPatterns {
		if p.MatchString(site) {
			return owners[i].name
		}
	}
	return "other"
}

// usage is live bytes, and free bytes of the spans that hold them (a span's free bytes split
// among its objects).
type usage struct{ live, free float64 }

type summary struct {
	heapInuse, spans float64
	bySite           map[string]usage
	byOwner          map[string]usage
	soleOwner        map[string]float64 // bytes of spans whose objects all have this owner
	shared           float64            // bytes of spans whose objects have several owners
	metadata         float64            // span tails the runtime reserves (mark bits, bitmaps)
	sampledTail      int                // objects with a sample found in a span's tail: none, if slotsOf is right
	unsampled        int                // objects without a sample (allocated before profiling began)
	empty            float64            // spans in use with no object in them, tails aside
}

func (d *dump) summarize(classes map[uint64]uint64) *summary {
	s := &summary{heapInuse: float64(d.heapInuse), bySite: map[string]usage{}, byOwner: map[string]usage{}, soleOwner: map[string]float64{}}
	siteOf := func(x object) string {
		// A sample names the address the allocation returned: past the object's 8-byte
		// malloc header when it has one (a small object of over 512 bytes, with pointers).
		// For an object of 512 bytes or less, addr+8 is the next object's, or the next
		// span's first.
		if b, ok := d.sampled[x.addr]; ok {
			return d.sites[b]
		}
		if _, small := classes[x.size]; small && x.size > 512 {
			if b, ok := d.sampled[x.addr+8]; ok {
				return d.sites[b]
			}
		}
		return ""
	}
	for i := 0; i < len(d.objects); {
		o := d.objects[i]
		spanBytes, small := classes[o.size]
		base, j := o.addr, i+1
		if !small { // a large object has its span, of whole pages
			spanBytes = (o.size + 8191) &^ 8191
		} else {
			// A span starts on a page, holds objects of one size from its start: find the
			// start of o's, then take the dump's next objects that are in it.
			for b := o.addr &^ 8191; b+spanBytes > o.addr; b -= 8192 {
				if (o.addr-b)%o.size == 0 {
					base = b
					break
				}
			}
			for j < len(d.objects) && d.objects[j].size == o.size && d.objects[j].addr >= base && d.objects[j].addr < base+spanBytes {
				j++
			}
		}
		// The runtime's dump walks every slot of a span up to its end, and the slots past the
		// span's last object (its reserved tail: Green Tea's mark bits, the pointer bitmap)
		// come out as objects: metadata, not objects.
		objs := d.objects[i:j]
		if small {
			// A span holds objects with pointers or without. The slots before the longest
			// tail are objects in either case, and theirs say which.
			real := slotsOf(o.size, spanBytes, true)
			scan := slices.ContainsFunc(objs, func(x object) bool { return x.ptrs && (x.addr-base)/o.size < real })
			n := slotsOf(o.size, spanBytes, scan)
			objs = slices.DeleteFunc(slices.Clone(objs), func(x object) bool {
				if (x.addr-base)/o.size < n {
					return false
				}
				if siteOf(x) != "" {
					s.sampledTail++ // cannot be: the rule is wrong for this span
				}
				return true
			})
		}
		tail := float64(j-i-len(objs)) * float64(o.size)
		s.metadata += tail
		s.spans += float64(spanBytes)
		i = j
		if len(objs) == 0 { // a span in use whose slots are all free (an allocator's cache)
			s.empty += float64(spanBytes) - tail
			continue
		}
		n := float64(len(objs))
		free := (float64(spanBytes) - tail - n*float64(o.size)) / n
		spanOwners := map[string]bool{}
		for _, x := range objs {
			st := siteOf(x)
			if st == "" {
				s.unsampled++
			}
			u := s.bySite[st]
			u.live += float64(x.size)
			u.free += free
			s.bySite[st] = u
			ow := ownerOf(st)
			u = s.byOwner[ow]
			u.live += float64(x.size)
			u.free += free
			s.byOwner[ow] = u
			spanOwners[ow] = true
		}
		if len(spanOwners) == 1 {
			for ow := range spanOwners {
				s.soleOwner[ow] += float64(spanBytes)
			}
		} else {
			s.shared += float64(spanBytes)
		}
	}
	return s
}

// slotsOf is how many objects of size bytes a small-object span of spanBytes holds
// (runtime/mheap.go, initSpan: nelems, with Green Tea): its end is kept for the runtime's
// own use, for objects of up to 512 bytes (heapBitsInSpan): 128 bytes of inline mark bits
// (spanInlineMarkBits) for objects of 16 bytes or more, and, where the objects have pointers,
// a pointer bitmap of one bit a word.
func slotsOf(size, spanBytes uint64, scan bool) uint64 {
	var reserve uint64
	if size <= 512 && size >= 16 {
		reserve += 128
	}
	if size <= 512 && scan {
		reserve += spanBytes / 64
	}
	return (spanBytes - reserve) / size
}

// minus returns (s - base) / per.
func (s *summary) minus(base *summary, per float64) *summary {
	sub := func(a, b usage) usage { return usage{(a.live - b.live) / per, (a.free - b.free) / per} }
	subBytes := func(a, b float64) float64 { return (a - b) / per }
	return &summary{
		heapInuse: subBytes(s.heapInuse, base.heapInuse), spans: subBytes(s.spans, base.spans),
		bySite: diffMaps(s.bySite, base.bySite, sub), byOwner: diffMaps(s.byOwner, base.byOwner, sub),
		soleOwner: diffMaps(s.soleOwner, base.soleOwner, subBytes), shared: subBytes(s.shared, base.shared),
		metadata: subBytes(s.metadata, base.metadata), empty: subBytes(s.empty, base.empty),
		sampledTail: s.sampledTail + base.sampledTail, unsampled: s.unsampled - base.unsampled,
	}
}

// diffMaps returns sub(a[k], b[k]) for every key of either map (a missing one is zero).
func diffMaps[V any](a, b map[string]V, sub func(x, y V) V) map[string]V {
	out := map[string]V{}
	for k := range a {
		out[k] = sub(a[k], b[k])
	}
	for k := range b {
		out[k] = sub(a[k], b[k])
	}
	return out
}

func (s *summary) print(top int) {
	kib := func(v float64) string { return fmt.Sprintf("%.1f KiB", v/1024) }
	var live, free float64
	for _, u := range s.byOwner {
		live, free = live+u.live, free+u.free
	}
	fmt.Printf("heap in use %s (MemStats), spans found %s: live %s, free slots of spans in use %s\n", kib(s.heapInuse), kib(s.spans), kib(live), kib(free))
	fmt.Printf("span tails the runtime keeps (mark bits, pointer bitmaps) %s; spans with no object in them %s\n", kib(s.metadata), kib(s.empty))
	if s.sampledTail > 0 {
		fmt.Printf("WARNING: %d objects with an allocation sample lie in what this tool takes for span tails: its slotsOf does not match this Go's runtime\n", s.sampledTail)
	}
	fmt.Printf("spans whose objects have several owners: %s\n\n", kib(s.shared))
	fmt.Println("| owner | live | free slots beside it | spans it alone holds |")
	fmt.Println("| --- | --- | --- | --- |")
	byTotal := func(m map[string]usage) []string {
		return slices.SortedFunc(maps.Keys(m), func(a, b string) int {
			return cmp.Compare(m[b].live+m[b].free, m[a].live+m[a].free)
		})
	}
	for _, ow := range byTotal(s.byOwner) {
		u := s.byOwner[ow]
		fmt.Printf("| %s | %s | %s | %s |\n", ow, kib(u.live), kib(u.free), kib(s.soleOwner[ow]))
	}
	fmt.Printf("\nallocation sites (live, free slots beside):\n")
	for i, st := range byTotal(s.bySite) {
		if i == top {
			break
		}
		name := st
		if name == "" {
			name = "(no allocation sample in the dump)"
		}
		fmt.Printf("  %10s %10s  %s\n", kib(s.bySite[st].live), kib(s.bySite[st].free), name)
	}
}
