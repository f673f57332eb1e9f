package fleet

import (
	"fmt"
	"sort"
	gosync "sync"
	"time"

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
	patches map[string][]time.Time // cluster|kind|name -> recent patch times
	desired map[string]string      // cluster|kind|name -> desired metadata those patches applied
	until   map[string]time.Time   // cluster|kind|name -> held until
	pools   map[string]string      // cluster|kind|name -> pool
}

func newContestTracker(threshold int, window time.Duration) *contestTracker {
	return &contestTracker{threshold: threshold, window: window, now: time.Now,
		patches: map[string][]time.Time{}, desired: map[string]string{}, until: map[string]time.Time{}, pools: map[string]string{}}
}

func contestKey(cluster, kind, name string) string { return cluster + "|" + kind + "|" + name }

// isHeld reports whether t's Machine or Node is held now.
func (c *contestTracker) isHeld(cluster string, t nmsync.Target) bool {
	if c.threshold <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	keys := []string{contestKey(cluster, nmsync.ResultKindMachine, t.Machine.Name)}
	if t.Node != nil {
		keys = append(keys, contestKey(cluster, nmsync.ResultKindNode, t.Node.Name))
	}
	for _, k := range keys {
		if until, ok := c.until[k]; ok {
			if now.Before(until) {
				return true
			}
			delete(c.until, k)
			delete(c.pools, k)
			delete(c.patches, k)
			delete(c.desired, k)
		}
	}
	return false
}

// record notes a result written for the desired metadata desired (a
// fingerprint of the pool's Desired) and reports whether its object just
// became held.
func (c *contestTracker) record(cluster, pool, desired string, r nmsync.Result) bool {
	if c.threshold <= 0 || r.Outcome != nmsync.OutcomePatched || onlyAdoptions(r.Changes) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	k := contestKey(cluster, r.Kind, r.Name)
	if c.desired[k] != desired {
		c.desired[k] = desired
		delete(c.patches, k)
	}
	recent := c.patches[k][:0]
	for _, t := range c.patches[k] {
		if now.Sub(t) < c.window {
			recent = append(recent, t)
		}
	}
	recent = append(recent, now)
	c.patches[k] = recent
	if len(recent) >= c.threshold {
		c.until[k] = now.Add(c.window)
		c.pools[k] = pool
		return true
	}
	return false
}

func onlyAdoptions(changes []nmsync.Change) bool {
	for _, ch := range changes {
		if ch.Op != nmsync.OpAdopt {
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
	for k, p := range c.pools {
		if p == pool && now.Before(c.until[k]) && len(k) > len(cluster) && k[:len(cluster)+1] == cluster+"|" {
			n++
		}
	}
	c.mu.Unlock()
	m.Contested.WithLabelValues(cluster, pool).Set(float64(n))
}

// forget drops a cluster's records.
func (c *contestTracker) forget(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := cluster + "|"
	for _, m := range []map[string]time.Time{c.until} {
		for k := range m {
			if len(k) > len(p) && k[:len(p)] == p {
				delete(m, k)
			}
		}
	}
	for k := range c.patches {
		if len(k) > len(p) && k[:len(p)] == p {
			delete(c.patches, k)
			delete(c.desired, k)
		}
	}
	for k := range c.pools {
		if len(k) > len(p) && k[:len(p)] == p {
			delete(c.pools, k)
		}
	}
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
