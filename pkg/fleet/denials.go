package fleet

import (
	"fmt"
	gosync "sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// denialTracker remembers objects whose patch a spoke refused in a way that
// retrying cannot fix (an admission webhook's denial, a 422): each is held
// (not sent again) for a retry period, or until the pool's desired metadata
// changes, so a denied object is retried on a slow cadence and never in a
// loop, while the rest of the pool carries on.
type denialTracker struct {
	retry time.Duration
	now   func() time.Time

	mu      gosync.Mutex
	records map[string]map[string]*denial // cluster -> kind/name -> denial
}

type denial struct {
	pool, desired string
	err           error
	until         time.Time
}

func newDenialTracker(retry time.Duration, now func() time.Time) *denialTracker {
	return &denialTracker{retry: retry, now: now, records: map[string]map[string]*denial{}}
}

// hold returns the Applier.Hold of one pool's sync: the earlier denial's
// error while the object is held for the same desired metadata.
func (d *denialTracker) hold(cluster, desired string) func(kind, name string) error {
	return func(kind, name string) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		rec := d.records[cluster][objectKey(kind, name)]
		if rec == nil || rec.desired != desired || !d.now().Before(rec.until) {
			return nil
		}
		return fmt.Errorf("held until %s after a denial that retrying cannot fix: %w", rec.until.UTC().Format(time.RFC3339), rec.err)
	}
}

// record notes the outcome of one object's sync and reports whether it is a
// new denial (one that was sent, not held).
func (d *denialTracker) record(cluster, pool, desired string, r nmsync.Result) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := objectKey(r.Kind, r.Name)
	switch {
	case r.Outcome == nmsync.OutcomeInSync || r.Outcome == nmsync.OutcomePatched:
		delete(d.records[cluster], k)
	case r.Reason == nmsync.ReasonDenied && r.Requests > 0:
		if d.records[cluster] == nil {
			d.records[cluster] = map[string]*denial{}
		}
		d.records[cluster][k] = &denial{pool: pool, desired: desired, err: r.Err, until: d.now().Add(d.retry)}
		return true
	}
	return false
}

// nextRetry returns how long until the cluster's first held object may be
// retried, and false when none is held.
func (d *denialTracker) nextRetry(cluster string) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var first time.Time
	for _, rec := range d.records[cluster] {
		if first.IsZero() || rec.until.Before(first) {
			first = rec.until
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(first.Sub(d.now()), 0), true
}

// forget drops a cluster's records.
func (d *denialTracker) forget(cluster types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.records, cluster.String())
}
