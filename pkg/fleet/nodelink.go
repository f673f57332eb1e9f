package fleet

import (
	"slices"
	"strings"
	gosync "sync"
	"time"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// Living beside nodelink. machine-api's nodelink controller copies every
// Machine's spec.metadata.labels (overwriting values) and spec.taints
// (adding missing key+effect) onto its Node, from its own cache. When it acts
// on a Machine it has not yet seen updated, it writes back onto the Node what
// this controller has just removed or replaced there. nodeMemory remembers,
// per Node, what was removed or replaced and when the Node was last written:
//
//   - a removed item that comes back with the removed value within
//     tombstoneTTL is not foreign: it is removed again (Desired.Reclaim);
//   - a Node changed back (an item reclaimed, or a value set back to the one
//     replaced) less than NodeSettle after the last write is left alone
//     until NodeSettle has passed: by then nodelink has seen the Machine and
//     usually fixes a label itself, so a change costs at most one extra
//     write, and the two never fight.
//
// The memory is in-process: after a restart, a copy-back that raced with it
// is foreign, and stays (see pkg/sync's doc.go).
type nodeMemory struct {
	settle time.Duration
	now    func() time.Time

	mu    gosync.Mutex
	nodes map[string]*nodeRecord // cluster/node
}

// tombstoneTTL bounds how long a removed or replaced value is recognised:
// far longer than nodelink's lag on a busy cluster, short enough that
// someone who sets the same key=value by hand later keeps it.
const tombstoneTTL = 2 * time.Minute

type nodeRecord struct {
	wrote             time.Time
	removed, replaced map[string]tomb // "label:key" or "taint:key:Effect" -> value
}

type tomb struct {
	value string
	at    time.Time
}

func newNodeMemory(settle time.Duration) *nodeMemory {
	return &nodeMemory{settle: settle, now: time.Now, nodes: map[string]*nodeRecord{}}
}

func itemKey(c nmsync.Change) string {
	if c.Kind == nmsync.KindTaint {
		return "taint:" + c.Key
	}
	return "label:" + c.Key
}

// reclaim is what Desired.Reclaim should name for a Node. A negative
// settle turns the memory off: nothing is reclaimed or held back.
func (m *nodeMemory) reclaim(ck, node string) nmsync.Reclaim {
	if m.settle < 0 {
		return nmsync.Reclaim{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.nodes[ck+"/"+node]
	if rec == nil {
		return nmsync.Reclaim{}
	}
	now := m.now()
	if now.Sub(rec.wrote) > tombstoneTTL {
		// Every tombstone has expired: the record goes (it is looked up on
		// every sync of the cluster, at least once per resync).
		delete(m.nodes, ck+"/"+node)
		return nmsync.Reclaim{}
	}
	var out nmsync.Reclaim
	for k, t := range rec.removed {
		if now.Sub(t.at) > tombstoneTTL {
			delete(rec.removed, k)
			continue
		}
		if kind, key, _ := strings.Cut(k, ":"); kind == "taint" {
			out.Taints = put(out.Taints, key, t.value)
		} else {
			out.Labels = put(out.Labels, key, t.value)
		}
	}
	return out
}

// holdBack is the Applier's Settle for cluster ck: a Node whose plan only
// undoes a copy-back, written less than settle ago, waits.
func (m *nodeMemory) holdBack(ck string) func(kind, name string, changes []nmsync.Change) bool {
	return func(kind, name string, changes []nmsync.Change) bool {
		if kind != nmsync.ResultKindNode || m.settle <= 0 {
			return false
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		rec := m.nodes[ck+"/"+name]
		if rec == nil || m.now().Sub(rec.wrote) >= m.settle {
			return false
		}
		for _, c := range changes {
			switch {
			case c.Op == nmsync.OpReclaim:
			case c.Op == nmsync.OpUpdate || c.Op == nmsync.OpOverride:
				if t, ok := rec.replaced[itemKey(c)]; !ok || t.value != c.From {
					return false // a change of the pool's: written now
				}
			default:
				return false // a change of the pool's: written now
			}
		}
		return true
	}
}

// record remembers a Node write: when, and what it removed or replaced.
func (m *nodeMemory) record(ck string, r nmsync.Result) {
	if r.Kind != nmsync.ResultKindNode || r.Outcome != nmsync.OutcomePatched {
		return
	}
	undoable := slices.ContainsFunc(r.Changes, func(c nmsync.Change) bool {
		return c.Op == nmsync.OpRemove || c.Op == nmsync.OpReclaim || c.Op == nmsync.OpUpdate || c.Op == nmsync.OpOverride
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	key := ck + "/" + r.Name
	rec := m.nodes[key]
	if rec == nil && !undoable {
		return // nothing nodelink could copy back: no record, no memory cost
	}
	if rec == nil {
		rec = &nodeRecord{removed: map[string]tomb{}, replaced: map[string]tomb{}}
		m.nodes[key] = rec
	}
	rec.wrote = now
	for _, c := range r.Changes {
		switch c.Op {
		case nmsync.OpRemove, nmsync.OpReclaim:
			rec.removed[itemKey(c)] = tomb{value: c.From, at: now}
		case nmsync.OpUpdate, nmsync.OpOverride:
			rec.replaced[itemKey(c)] = tomb{value: c.From, at: now}
			delete(rec.removed, itemKey(c))
		case nmsync.OpAdd:
			delete(rec.removed, itemKey(c)) // declared again: nothing to reclaim
		}
	}
	for k, t := range rec.replaced {
		if now.Sub(t.at) > tombstoneTTL {
			delete(rec.replaced, k)
		}
	}
}

func (m *nodeMemory) forget(ck string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.nodes {
		if strings.HasPrefix(k, ck+"/") {
			delete(m.nodes, k)
		}
	}
}

func put(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}
