package fleet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	gosync "sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// A write outage: every write of a cluster's last sync failed transiently
// (an admission webhook with failurePolicy Fail whose service is down, an API
// server answering writes with 5xx) and none went through. Retrying every
// drifted object with the exponential backoff would send the failing spoke a
// write per object per retry, and, once the fault clears, leave the pool
// waiting for a backoff grown as long as the outage (up to RetryCap). So,
// while the outage lasts, each sync writes one drifted object, a probe, every
// OutageProbeInterval: a probe that goes through ends the outage and the
// other objects are written at once, in the same sync; one that fails waits
// the interval again. The probed object rotates, so that an object whose own
// writes fail cannot hide that the others would go through.

// ReasonWriteOutage, on a Skipped result: the object was not written because
// the cluster is in a write outage and another object was probed, or no probe
// was due yet. It counts as drifted.
const ReasonWriteOutage = "WriteOutage"

// errWriteOutage holds an object back during a write outage (Applier.Hold).
var errWriteOutage = errors.New("not written: the cluster's writes are failing")

// outageTracker remembers the clusters in a write outage. Its decisions are
// pure functions of what it is told and of its clock.
type outageTracker struct {
	interval time.Duration // between probes; 0 or less: never in an outage
	now      func() time.Time

	mu       gosync.Mutex
	clusters map[string]*outage
}

// outage is one cluster's write outage.
type outage struct {
	since  time.Time
	sent   time.Time // when the last probe (or the sync that began it) ended
	probed string    // the target probed last: probes go on after it
	probes int       // probes sent
	cause  string    // the first transient error of the sync that began it
}

// writeRound is what one sync's writes did, as the tracker needs it.
type writeRound struct {
	// Patched and Transient count the objects written, and those whose write
	// failed transiently; Held those not written because of the outage.
	Patched, Transient, Held int
	// Probe is the target probed (its key), when the sync probed one.
	Probe string
	// Cause is the sync's first transient error.
	Cause string
}

// outageChange says what a sync did to a cluster's outage.
type outageChange int

const (
	outageNone    outageChange = iota // not in an outage, before or after
	outageEntered                     // every write failed: the outage begins
	outageGoesOn                      // still in the outage
	outageLeft                        // a write went through, or nothing is left to write
)

// probeTurn is what a sync of a cluster may write.
type probeTurn struct {
	// Active: the cluster is in a write outage; only a probe may be written.
	Active bool
	// Due: a probe may be sent now (Active only).
	Due bool
	// After is the target probed last; the probe is the next one after it.
	After string
}

func newOutageTracker(interval time.Duration, now func() time.Time) *outageTracker {
	return &outageTracker{interval: interval, now: now, clusters: map[string]*outage{}}
}

// turn says what the next sync of cluster may write.
func (o *outageTracker) turn(cluster string) probeTurn {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.clusters[cluster]
	if out == nil {
		return probeTurn{}
	}
	return probeTurn{Active: true, Due: !o.now().Before(out.sent.Add(o.interval)), After: out.probed}
}

// record takes in what a sync's writes did and says how the cluster's
// outage changed, with a copy of the outage (zero when there is none):
//   - not in an outage: writes that all failed transiently, none through,
//     begin one;
//   - in one: a write that went through ends it; a failed probe carries it
//     on (the next probe is due an interval later); a sync that held objects
//     back without probing carries it on as it was; a sync with nothing
//     failed and nothing held (the cluster is in sync, or what is left was
//     denied) ends it.
func (o *outageTracker) record(cluster string, w writeRound) (outageChange, outage) {
	if o.interval <= 0 {
		return outageNone, outage{}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	out := o.clusters[cluster]
	switch {
	case out == nil && w.Transient > 0 && w.Patched == 0:
		out = &outage{since: now, sent: now, cause: w.Cause}
		o.clusters[cluster] = out
		return outageEntered, *out
	case out == nil:
		return outageNone, outage{}
	}
	if w.Probe != "" {
		out.sent, out.probed = now, w.Probe
		out.probes++
	}
	if w.Patched > 0 || (w.Transient == 0 && w.Held == 0) {
		delete(o.clusters, cluster)
		return outageLeft, *out
	}
	return outageGoesOn, *out
}

// wait returns how long until the cluster's next probe is due, and false
// when it is not in an outage. It is never 0, which would not requeue.
func (o *outageTracker) wait(cluster string) (time.Duration, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.clusters[cluster]
	if out == nil {
		return 0, false
	}
	return max(out.sent.Add(o.interval).Sub(o.now()), 10*time.Millisecond), true
}

// drop ends a cluster's outage, if any, and reports whether it had one.
func (o *outageTracker) drop(cluster string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.clusters[cluster]
	delete(o.clusters, cluster)
	return ok
}

// outageWriter is the write path of a cluster in a write outage, around
// next, the plain one, which writes a cluster in none. In an outage, targets
// are written one at a time, in turn, until one write is sent (the probe):
// only if it goes through are the others written, by next, at once;
// otherwise, and while no probe is due, they are planned and not written
// (ReasonWriteOutage). It keeps the outages (outageTracker), and says and
// counts them (note).
type outageWriter struct {
	*outageTracker
	next    writer
	metrics *Metrics
}

func (w *outageWriter) write(ctx context.Context, ck string, b *writeBatch) {
	turn := w.turn(ck)
	if !turn.Active {
		w.next.write(ctx, ck, b)
		return
	}
	rest := false
	if turn.Due {
		b.probe, rest = w.probe(ctx, b, turn.After)
	}
	if rest {
		w.next.write(ctx, ck, b)
		return
	}
	for i, pw := range b.work {
		if pw == nil {
			continue
		}
		for j, t := range pw.targets {
			if b.results[i][j] == nil {
				b.results[i][j] = heldForOutage(ctx, b.appliers[i], t.desired, t.target)
			}
		}
	}
}

// forget ends the cluster's outage, if any, in the gauge too.
func (w *outageWriter) forget(c types.NamespacedName) {
	if w.drop(c.String()) {
		w.metrics.WriteOutages.Dec()
	}
}

// probe writes targets of a cluster in a write outage one at a time, in
// turn after the one probed last, until one sends a write that goes through
// or fails transiently. A target that sends nothing (in sync, held) or whose
// write the spoke refuses or finds gone tells nothing of the outage: the next
// is tried. It returns the key of the last target that sent a write, and
// whether the targets not yet written may be written now: the probe went
// through, or no target failed.
func (w *outageWriter) probe(ctx context.Context, b *writeBatch, after string) (string, bool) {
	probe := ""
	for _, ref := range probeOrder(b.work, after) {
		t := b.work[ref.pool].targets[ref.target]
		res := b.appliers[ref.pool].SyncTarget(ctx, t.desired, t.target)
		b.results[ref.pool][ref.target] = res
		switch judgeProbe(res) {
		case probeThrough:
			return ref.key, true
		case probeFailed:
			return ref.key, false
		case probeAnswered:
			probe = ref.key
		}
	}
	return probe, true
}

// targetRef is one target of a sync: work[pool].targets[target].
type targetRef struct {
	pool, target int
	key          string
}

// probeOrder lists the targets that may be probed (not held after a
// contest), by the name of their Machine, starting after the one probed
// last and wrapping around. The cache lists objects in no fixed order; the
// names give the rotation one.
func probeOrder(work []*poolWork, after string) []targetRef {
	var refs []targetRef
	for i, pw := range work {
		if pw == nil {
			continue
		}
		for j, w := range pw.targets {
			if w.held || w.target.Machine == nil {
				continue
			}
			refs = append(refs, targetRef{pool: i, target: j, key: w.target.Machine.Namespace + "/" + w.target.Machine.Name})
		}
	}
	sort.Slice(refs, func(a, b int) bool { return refs[a].key < refs[b].key })
	first := sort.Search(len(refs), func(i int) bool { return refs[i].key > after })
	return append(refs[first:len(refs):len(refs)], refs[:first]...)
}

// probeVerdict is what one target's results say of the cluster's writes.
type probeVerdict int

const (
	probeNotSent  probeVerdict = iota // nothing was sent (in sync, held, settling)
	probeThrough                      // a write went through: the outage is over
	probeFailed                       // a write failed transiently: the outage goes on
	probeAnswered                     // the spoke answered otherwise (denied, gone): try the next
)

func judgeProbe(results []nmsync.Result) probeVerdict {
	sent, failed := false, false
	for _, r := range results {
		if r.Requests == 0 {
			continue
		}
		sent = true
		switch {
		case r.Outcome == nmsync.OutcomePatched:
			return probeThrough
		case r.Outcome == nmsync.OutcomeConflict, r.Outcome == nmsync.OutcomeFailed && r.Reason != nmsync.ReasonDenied:
			failed = true
		}
	}
	switch {
	case failed:
		return probeFailed
	case sent:
		return probeAnswered
	}
	return probeNotSent
}

// heldForOutage plans a target as a's sync would, and sends nothing, not
// even a read (the plan is made on the cached objects): each drifted object
// that a would have patched is Skipped with ReasonWriteOutage. What a would
// hold otherwise (a denial's hold, a settling Node) keeps its own result.
func heldForOutage(ctx context.Context, a *nmsync.Applier, d nmsync.Desired, t nmsync.Target) []nmsync.Result {
	held := *a
	held.Client, held.Reader = noWrites{}, nil
	hold := a.Hold
	held.Hold = func(kind, name string) error {
		if hold != nil {
			if err := hold(kind, name); err != nil {
				return err
			}
		}
		return errWriteOutage
	}
	out := held.SyncTarget(ctx, d, t)
	for i := range out {
		if errors.Is(out[i].Err, errWriteOutage) {
			out[i].Outcome, out[i].Reason, out[i].Err, out[i].Requests = nmsync.OutcomeSkipped, ReasonWriteOutage, nil, 0
		}
	}
	return out
}

// noWrites is the client of an applier that must send nothing: Hold stops it
// before a patch, and it has no reads.
type noWrites struct{}

func (noWrites) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	return errWriteOutage
}

// note takes in what a sync's writes did (probe is the target probed,
// if any) for the cluster's write outage: it logs and counts its start and
// end, and marks the synced pools' results while it lasts, so that their
// statuses say the writes are failing without changing with each probe.
func (w *outageWriter) note(ctx context.Context, ck string, d *Decision, probe string) {
	round := roundOf(d.Results, probe)
	change, o := w.record(ck, round)
	if probe != "" {
		w.metrics.OutageProbes.Inc()
	}
	// The context's logger names the cluster.
	logger := log.FromContext(ctx)
	switch change {
	case outageNone:
		return
	case outageEntered:
		// Inc and Dec, not the tracker's size: the gauge is shared by every
		// reconciler of the process's registry (tests run several).
		w.metrics.WriteOutages.Inc()
		logger.Error(errors.New(o.cause), "write outage: every write to the spoke failed; writing one object at a time until one goes through", "probeInterval", w.interval.String())
	case outageLeft:
		w.metrics.WriteOutages.Dec()
		why := "a write went through"
		if round.Patched == 0 {
			why = "nothing failing is left to write (in sync, denied, or not synced now)"
		}
		logger.Info("write outage over", "why", why, "lasted", w.now().Sub(o.since).Round(time.Millisecond).String(), "probes", o.probes, "probe", probe)
		return
	}
	msg := outageMessage(o, w.interval)
	for i := range d.Results {
		if d.Desired[i] != nil {
			d.Results[i].WriteOutage, d.Results[i].OutageReported = msg, change == outageGoesOn
		}
	}
}

// roundOf tallies a sync's results for the tracker.
func roundOf(res []PoolResult, probe string) writeRound {
	w := writeRound{Probe: probe}
	for _, pr := range res {
		c := Count(pr.Results)
		w.Patched += c.Patched
		w.Transient += c.Transient
		w.Held += c.Outage
		if w.Cause == "" && c.Transient > 0 {
			w.Cause = firstTransient(pr.Results)
		}
	}
	return w
}

// outageMessage is what the statuses of a cluster's pools say during a write
// outage. It stays the same for the whole outage, so a probe that fails
// rewrites no status.
func outageMessage(o outage, interval time.Duration) string {
	return fmt.Sprintf("every write to the spoke fails; one object is tried every %s until a write goes through, then the rest at once: %s", interval, o.cause)
}
