package remote

import (
	"sync"
	"time"
	"unique"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// Why records are packed. A record is made from a list item or a watch event, as six to nine
// small heap objects (the record, its identity string, its label handles...) allocated among the
// decoding's garbage, many times their size. Go's heap does not move objects: once the garbage is
// freed, each span that holds one of a record's objects stays in use with its free slots, and a
// spoke's records end up spread over hundreds of mostly empty spans, more free slots in use than
// records (hack/heapdump shows each object's span and allocation site; docs/benchmark-notes.md).
//
// So once a spoke's cache has gone quiet after a burst (its lists, a wave of writes; packQuiet),
// its records are copied into an arena: one array per type, each allocated once and at its exact
// size (rounded to whole pages when that costs little, so that no other object shares its
// spans), and the loose records become garbage that frees whole spans. Records stay immutable
// once published (readers hold them without a lock), except their resourceVersion, which an
// update that changes nothing else stores in place: a Node's periodic status update then
// allocates no record at all, and the arena stays whole.

// packQuiet is how long a spoke's cache must go without a change to a record before its records
// are packed: a burst (a connect's lists, a wave of writes and their events) is over by then.
// Longer is worse: a restart of a shard then packs every spoke later, in one wave whose garbage
// is still in the RSS well after the last cluster is InSync.
const packQuiet = 5 * time.Second

// packLooseShare: records are packed when at least 1/packLooseShare of them were made (or
// deleted) since the last packing, so that a lone change does not copy a whole spoke's records.
const packLooseShare = 8

// packer packs one spoke's records (all its kinds' stores together, so that the arena's arrays
// are few and large) once the spoke has gone packQuiet without a change.
type packer struct {
	stores []*kindStore
	quiet  time.Duration
	clock  clock.WithDelayedExecution

	mu      sync.Mutex
	loose   int // records made or deleted since the last packing
	timer   clock.Timer
	stopped bool
	packs   int // packings done (for tests)
}

func newPacker(quiet time.Duration, clk clock.WithDelayedExecution) *packer {
	return &packer{quiet: quiet, clock: clk}
}

// touch records n records made or deleted, and puts the packing off to quiet from now.
func (p *packer) touch(n int) {
	if p == nil || n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.loose += n
	if p.timer == nil {
		p.timer = p.clock.AfterFunc(p.quiet, p.quietFor)
	} else {
		p.timer.Reset(p.quiet)
	}
}

// stop ends the packing: the cache is no longer read.
func (p *packer) stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if p.timer != nil {
		p.timer.Stop()
	}
}

// quietFor runs once the spoke has gone quiet: it packs when enough records are loose.
func (p *packer) quietFor() {
	p.mu.Lock()
	loose, stopped := p.loose, p.stopped
	p.mu.Unlock()
	if stopped {
		return
	}
	total := 0
	for _, st := range p.stores {
		st.mu.RLock()
		total += len(st.items)
		st.mu.RUnlock()
	}
	if loose*packLooseShare < total {
		return
	}
	p.pack()
}

// pack copies every store's records into one new arena, and gives each store a new map of them.
func (p *packer) pack() {
	for _, st := range p.stores {
		st.mu.Lock()
	}
	defer func() {
		for _, st := range p.stores {
			st.mu.Unlock()
		}
	}()
	var all [][]*record
	for _, st := range p.stores {
		recs := make([]*record, 0, len(st.items))
		for _, r := range st.items {
			recs = append(recs, r)
		}
		all = append(all, recs)
	}
	packed := packRecords(all...)
	for i, st := range p.stores {
		items := make(map[string]*record, len(packed[i]))
		for _, r := range packed[i] {
			items[r.name()] = r
		}
		st.items = items
	}
	p.mu.Lock()
	p.loose = 0
	p.packs++
	p.mu.Unlock()
}

// packRecords returns copies of each group of records, in the same order, made in one arena.
// Interned strings and handles (shared by the whole process) are not copied; the rare
// pointers a record keeps of its own (a deletion timestamp, a taint's timeAdded) are shared
// with the original, which never writes them.
func packRecords(groups ...[]*record) [][]*record {
	var n arenaSize
	for _, g := range groups {
		for _, r := range g {
			n.add(r)
		}
	}
	a := arena{
		records:  make([]record, 0, pageRounded[record](n.records)),
		bytes:    make([]byte, 0, pageRounded[byte](n.bytes)),
		handles:  make([]unique.Handle[pair], 0, pageRounded[unique.Handle[pair]](n.handles)),
		machines: make([]machineFields, 0, pageRounded[machineFields](n.machines)),
		owners:   make([]metav1.OwnerReference, 0, pageRounded[metav1.OwnerReference](n.owners)),
	}
	out := make([][]*record, len(groups))
	for i, g := range groups {
		out[i] = make([]*record, len(g))
		for j, r := range g {
			out[i][j] = a.copy(r)
		}
	}
	return out
}

// arenaSize counts what an arena needs for a set of records.
type arenaSize struct{ records, bytes, handles, machines, owners int }

func (n *arenaSize) add(r *record) {
	n.records++
	n.bytes += len(r.id) + len(r.labels.own) + len(r.annotations.own)
	n.handles += len(r.labels.shared) + len(r.annotations.shared)
	if m := r.machine; m != nil {
		n.machines++
		n.owners += len(m.owners)
		n.bytes += len(m.nodeLabels.own) + len(m.nodeName)
		n.handles += len(m.nodeLabels.shared)
	}
}

// arena holds packed records and what they point to. Each array is made at the size
// arenaSize counted and never grows, so nothing in it moves once a record points there.
type arena struct {
	records  []record
	bytes    []byte
	handles  []unique.Handle[pair]
	machines []machineFields
	owners   []metav1.OwnerReference
}

// copy returns a copy of r made in the arena.
func (a *arena) copy(r *record) *record {
	a.records = a.records[:len(a.records)+1]
	c := &a.records[len(a.records)-1]
	c.id = a.string(r.id)
	c.rv.Store(r.rv.Load())
	c.labels = a.pairs(r.labels)
	c.annotations = a.pairs(r.annotations)
	c.deletion = r.deletion
	c.taints = r.taints
	c.health = r.health
	if m := r.machine; m != nil {
		a.machines = a.machines[:len(a.machines)+1]
		cm := &a.machines[len(a.machines)-1]
		cm.nodeLabels = a.pairs(m.nodeLabels)
		cm.nodeName = a.string(m.nodeName)
		cm.phase, cm.hasPhase = m.phase, m.hasPhase
		if len(m.owners) > 0 {
			start := len(a.owners)
			a.owners = append(a.owners, m.owners...)
			cm.owners = a.owners[start:len(a.owners):len(a.owners)]
		}
		c.machine = cm
	}
	return c
}

func (a *arena) pairs(p pairs) pairs {
	out := pairs{own: a.string(p.own)}
	if len(p.shared) > 0 {
		start := len(a.handles)
		a.handles = append(a.handles, p.shared...)
		out.shared = a.handles[start:len(a.handles):len(a.handles)]
	}
	return out
}

func (a *arena) string(s string) string {
	if s == "" {
		return ""
	}
	start := len(a.bytes)
	a.bytes = append(a.bytes, s...)
	return unsafe.String(&a.bytes[start], len(s)) // the arena's bytes are never written again
}

// pageRounded returns a capacity of at least n elements of T: as many as whole pages hold, so
// that the array has its span (or spans) to itself, when that wastes at most an eighth of them
// (size classes from 8 KiB up to 32 KiB whose size is a whole number of pages hold one object a
// span, and larger objects get spans of their own); else n, and the array shares a span with
// objects of its size class, as any small object does (at a fleet's scale, mostly other spokes'
// arrays of the same size).
func pageRounded[T any](n int) int {
	const page = 8 << 10
	size := int(unsafe.Sizeof(*new(T)))
	rounded := (n*size + page - 1) / page * page / size
	if (rounded-n)*size*8 > n*size {
		return n
	}
	return rounded
}
