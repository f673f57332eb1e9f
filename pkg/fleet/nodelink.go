package fleet

import (
	"slices"
	"strings"
	gosync "sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

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
//     tombstoneTTL of its removal, while the Machine does not hold it, is
//     not foreign: it is removed again (Desired.Reclaim);
//   - a Node changed back (an item reclaimed, or a value set back to the one
//     replaced) less than NodeSettle after the last write is left alone
//     until NodeSettle has passed: by then nodelink has seen the Machine and
//     usually fixes a label itself, so a change costs at most one extra
//     write, and the two never fight.
//
// Only Nodes whose write removed or replaced something have a record, and a
// cluster's expired records go at its next sync. The memory is in-process:
// after a restart, a copy-back that raced with it is foreign, and stays (see
// pkg/sync's doc.go).
type nodeMemory struct {
	settle time.Duration
	now    func() time.Time

	mu       gosync.Mutex
	clusters map[string]map[string]*nodeRecord // cluster -> Node name -> record
}

// tombstoneTTL bounds how long a removed or replaced value is recognised:
// far longer than nodelink's lag on a busy cluster, short enough that
// someone who sets the same key=value by hand later keeps it.
const tombstoneTTL = 2 * time.Minute

type nodeRecord struct {
	wrote time.Time
	// removed: "label:key" or "taint:key:Effect" -> the value removed.
	// replaced: the same keys -> the value replaced (from) and written (to).
	removed  map[string]tomb
	replaced map[string]tomb
}

type tomb struct {
	value, to string
	at        time.Time
}

func newNodeMemory(settle time.Duration, now func() time.Time) *nodeMemory {
	return &nodeMemory{settle: settle, now: now, clusters: map[string]map[string]*nodeRecord{}}
}

func itemKey(c nmsync.Change) string {
	if c.Kind == nmsync.KindTaint {
		return "taint:" + c.Key
	}
	return "label:" + c.Key
}

// sweep drops a cluster's records whose tombstones have all expired
// (Nodes deleted or replaced too): called once per sync of the cluster.
func (m *nodeMemory) sweep(ck string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for name, rec := range m.clusters[ck] {
		if now.Sub(rec.wrote) > tombstoneTTL {
			delete(m.clusters[ck], name)
		}
	}
	if len(m.clusters[ck]) == 0 {
		delete(m.clusters, ck)
	}
}

// reclaim is what Desired.Reclaim should name for t's Node: the items
// removed from it within tombstoneTTL that its Machine does not hold (if the
// Machine holds one, nodelink's copy is right). A negative settle turns the
// memory off: nothing is reclaimed or held back.
func (m *nodeMemory) reclaim(ck string, t nmsync.Target) nmsync.Reclaim {
	if m.settle < 0 || t.Node == nil {
		return nmsync.Reclaim{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.clusters[ck][t.Node.Name]
	if rec == nil {
		return nmsync.Reclaim{}
	}
	now := m.now()
	out := nmsync.Reclaim{Labels: map[string]string{}, Taints: map[string]string{}}
	for k, tb := range rec.removed {
		if now.Sub(tb.at) > tombstoneTTL {
			delete(rec.removed, k)
			continue
		}
		if kind, key, _ := strings.Cut(k, ":"); kind == "taint" {
			out.Taints[key] = tb.value
		} else {
			out.Labels[key] = tb.value
		}
	}
	return out.Except(t.Machine)
}

// holdBack is the Applier's Settle for cluster ck: a Node whose plan only
// undoes a copy-back (reclaims, or values set back to what this controller
// wrote), written less than settle ago, waits. Any other change is the
// pool's, and is written at once.
func (m *nodeMemory) holdBack(ck string) func(kind, name string, changes []nmsync.Change) bool {
	return func(kind, name string, changes []nmsync.Change) bool {
		if kind != nmsync.ResultKindNode || m.settle <= 0 || len(changes) == 0 {
			return false
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		rec := m.clusters[ck][name]
		if rec == nil || m.now().Sub(rec.wrote) >= m.settle {
			return false
		}
		for _, c := range changes {
			switch c.Op {
			case nmsync.OpReclaim:
			case nmsync.OpUpdate, nmsync.OpOverride:
				if tb, ok := rec.replaced[itemKey(c)]; !ok || tb.value != c.From || tb.to != c.To {
					return false
				}
			default:
				return false
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
	rec := m.clusters[ck][r.Name]
	if rec == nil && !undoable {
		return // nothing nodelink could copy back: no record, no memory cost
	}
	if rec == nil {
		if m.clusters[ck] == nil {
			m.clusters[ck] = map[string]*nodeRecord{}
		}
		rec = &nodeRecord{removed: map[string]tomb{}, replaced: map[string]tomb{}}
		m.clusters[ck][r.Name] = rec
	}
	rec.wrote = now
	for _, c := range r.Changes {
		k := itemKey(c)
		switch c.Op {
		case nmsync.OpRemove:
			rec.removed[k] = tomb{value: c.From, at: now}
		case nmsync.OpReclaim:
			// The tombstone keeps the time of the removal: a reclaim does not
			// extend it, so a copy that keeps coming back is left after the TTL.
			if tb, ok := rec.removed[k]; !ok || tb.value != c.From {
				rec.removed[k] = tomb{value: c.From, at: now}
			}
		case nmsync.OpUpdate, nmsync.OpOverride:
			rec.replaced[k] = tomb{value: c.From, to: c.To, at: now}
			delete(rec.removed, k)
		case nmsync.OpAdd:
			delete(rec.removed, k) // declared again: nothing to reclaim
		}
	}
	for k, tb := range rec.replaced {
		if now.Sub(tb.at) > tombstoneTTL {
			delete(rec.replaced, k)
		}
	}
}

func (m *nodeMemory) forget(c types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.clusters, c.String())
}
