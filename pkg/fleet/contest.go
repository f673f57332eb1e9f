package fleet

import (
	"fmt"
	"sort"
	gosync "sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// contestTracker notices another writer that keeps undoing a pool's
// metadata on the same object: after threshold patches of one object for
// the same desired metadata within window, the object is held (not written)
// for one window and reported, instead of fighting forever. Patches caused
// by a change of the pool itself reset the count. A threshold <= 0
// disables it.
type contestTracker struct {
	threshold int
	window    time.Duration
	now       func() time.Time

	mu      gosync.Mutex
	records map[string]map[string]*contestRecord // cluster -> kind|name -> record
}

// contestRecord is what is known of one object's recent patches.
type contestRecord struct {
	pool    string
	desired string      // fingerprint of the metadata the patches applied
	patches []time.Time // within the window
	until   time.Time   // held until then (zero: not held)
}

func newContestTracker(threshold int, window time.Duration, now func() time.Time) *contestTracker {
	return &contestTracker{threshold: threshold, window: window, now: now, records: map[string]map[string]*contestRecord{}}
}

func objectKey(kind, name string) string { return kind + "|" + name }

// isHeld reports whether t's Machine or Node is held now.
func (c *contestTracker) isHeld(cluster, desired string, t nmsync.Target) bool {
	if c.threshold <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	keys := []string{objectKey(nmsync.ResultKindMachine, t.Machine.Name)}
	if t.Node != nil {
		keys = append(keys, objectKey(nmsync.ResultKindNode, t.Node.Name))
	}
	for _, k := range keys {
		rec := c.records[cluster][k]
		if rec == nil || rec.until.IsZero() {
			continue
		}
		if now.Before(rec.until) && rec.desired == desired {
			return true // a changed pool is written at once: the hold was about the old one
		}
		delete(c.records[cluster], k) // released: start counting afresh
	}
	return false
}

// record notes a result written for the desired metadata desired (a
// fingerprint of the pool's Desired) and reports whether its object just
// became held.
func (c *contestTracker) record(cluster, pool, desired string, r nmsync.Result) bool {
	if c.threshold <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := objectKey(r.Kind, r.Name)
	if rec := c.records[cluster][k]; rec != nil && rec.desired != desired {
		// The object was synced for another pool spec since: its count
		// starts afresh, whatever this sync wrote (an adoption too, as when
		// nodelink copied the new items first).
		delete(c.records[cluster], k)
	}
	if r.Outcome != nmsync.OutcomePatched || onlyBookkeeping(r.Changes) {
		return false
	}
	now := c.now()
	if c.records[cluster] == nil {
		c.records[cluster] = map[string]*contestRecord{}
	}
	rec := c.records[cluster][k]
	if rec == nil || rec.desired != desired {
		rec = &contestRecord{pool: pool, desired: desired}
		c.records[cluster][k] = rec
	}
	recent := rec.patches[:0]
	for _, t := range rec.patches {
		if now.Sub(t) < c.window {
			recent = append(recent, t)
		}
	}
	rec.patches = append(recent, now)
	if len(rec.patches) >= c.threshold {
		rec.until = now.Add(c.window)
		return true
	}
	return false
}

func onlyBookkeeping(changes []nmsync.Change) bool {
	for _, ch := range changes {
		if ch.Op != nmsync.OpAdopt && ch.Op != nmsync.OpRelease {
			return false
		}
	}
	return true
}

// setGauge publishes how many objects of a pool are held.
func (c *contestTracker) setGauge(m *Metrics, cluster, pool string) {
	c.mu.Lock()
	n := 0
	now := c.now()
	for _, rec := range c.records[cluster] {
		if rec.pool == pool && now.Before(rec.until) {
			n++
		}
	}
	c.mu.Unlock()
	m.Contested.WithLabelValues(cluster, pool).Set(float64(n))
}

// nextRelease is how long until the first hold of a cluster ends.
func (c *contestTracker) nextRelease(cluster string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	now := c.now()
	for k, rec := range c.records[cluster] {
		if rec.until.IsZero() {
			continue
		}
		if !now.Before(rec.until) {
			delete(c.records[cluster], k) // ended: nothing to wake up for
			continue
		}
		if first.IsZero() || rec.until.Before(first) {
			first = rec.until
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return first.Sub(now), true
}

// forget drops a cluster's records.
func (c *contestTracker) forget(cluster types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.records, cluster.String())
}

// fingerprint identifies a pool's desired metadata, so that patches for a
// new pool spec are not mistaken for a fight.
func fingerprint(d nmsync.Desired) string {
	return fmt.Sprintf("%v|%v|%v", sortedPairs(d.Labels), sortedPairs(d.MachineLabels), d.Taints)
}

func sortedPairs(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
