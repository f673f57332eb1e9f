package fleet

import (
	"fmt"
	"slices"
	"strings"
	gosync "sync"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// Rollout is where one pool's paced NoExecute taints stand after a sync.
type Rollout struct {
	// Taints are the pool's NoExecute taints that are not yet on every
	// paced target.
	Taints []corev1.Taint
	Pacing nmsync.Pacing
	// Total counts the paced targets (Machines with a Node); Batch is the
	// batch size for that many.
	Total, Batch int
	// Waiting are the Machines (and their Nodes) the rollout has not
	// reached: planned without the paced taints. Started are the Machines a
	// new batch took in this sync; Finishing those of an earlier batch not
	// yet done on the spoke (a write that failed, or a cache that lags).
	Waiting, Started, Finishing []string
	// NextBatch is when the next batch is due (zero in a dry run and the
	// drift report, which start none); when a window holds it, when the
	// window opens.
	NextBatch time.Time
	// Hold says why no new batch starts, whether or not one is due yet:
	// Nodes that are not ready, or a closed maintenance window.
	Hold Hold
}

// Hold is why a paced rollout starts no new batch (holdOf).
type Hold struct {
	// Reason is v1alpha1.ReasonNodesNotReady or ReasonOutsideWindow; empty
	// when nothing holds the rollout.
	Reason, Message string
	// Nodes are the Nodes the health gate waits for.
	Nodes []string
	// Until is when the window opens (ReasonOutsideWindow).
	Until time.Time
}

// maxNamed bounds the Nodes a hold's message names.
const maxNamed = 5

// holdOf is the rollout's health gate and maintenance window, judged on
// the pool's Node objects alone (no pods are read):
//   - outside the pool's window, no batch starts; the hold says when the
//     next window opens;
//   - no batch starts while a Node the rollout already tainted (Done or
//     Started) is NotReady (Ready False or Unknown): the taint may be what
//     made it so, or the Node is sick and evicting more pods now would
//     compound it;
//   - nor while more of the pool's Nodes than a batch are NotReady or
//     unschedulable: a batch would take capacity a degraded pool lacks.
//
// Node events bring the cluster back as soon as a Node's readiness changes.
//
// excused are the Machines whose Node was already NotReady or cordoned when
// a batch took it (the gate takes such Nodes last): their state is not the
// rollout's doing, so they do not hold it.
func holdOf(p nmsync.Pacing, targets []nmsync.Target, progress []nmsync.Progress, batch int, now time.Time, excused map[string]bool) Hold {
	if w := p.Window; w != nil {
		if open, next := w.Open(now); !open {
			return Hold{Reason: v1alpha1.ReasonOutsideWindow, Until: next,
				Message: fmt.Sprintf("held: outside the maintenance window; the next opens at %s", next.UTC().Format(time.RFC3339))}
		}
	}
	var tainted, sick []string
	for j, t := range targets {
		if t.Node == nil || progress[j] == nmsync.ProgressExempt {
			continue
		}
		notReady := !nodeReady(t.Node)
		if notReady && (progress[j] == nmsync.ProgressDone || progress[j] == nmsync.ProgressStarted) && !excused[t.Machine.Name] {
			tainted = append(tainted, t.Node.Name)
		}
		if nodeSick(t.Node) {
			sick = append(sick, t.Node.Name)
		}
	}
	switch {
	case len(tainted) > 0:
		return Hold{Reason: v1alpha1.ReasonNodesNotReady, Nodes: tainted,
			Message: fmt.Sprintf("held: Node(s) already tainted by this rollout are NotReady: %s; the next batch waits until they are Ready", named(tainted))}
	case len(sick) > batch:
		return Hold{Reason: v1alpha1.ReasonNodesNotReady, Nodes: sick,
			Message: fmt.Sprintf("held: %d of the pool's Nodes are NotReady or unschedulable, more than a batch (%d): %s; the next batch waits until no more than %d are", len(sick), batch, named(sick), batch)}
	}
	return Hold{}
}

// nodeSick reports whether a Node is NotReady or cordoned.
func nodeSick(n *corev1.Node) bool { return !nodeReady(n) || n.Spec.Unschedulable }

// nodeReady reports whether a Node's Ready condition is not False or
// Unknown. A Node without one (kubelet has not reported yet) has nothing
// to judge it by, and counts as ready.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return true
}

// named lists names for a message, the first maxNamed of them.
func named(names []string) string {
	if len(names) <= maxNamed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamed], ", "), len(names)-maxNamed)
}

// Done counts the paced targets that hold the taints or are being written.
func (r *Rollout) Done() int { return r.Total - len(r.Waiting) }

// TaintList says the paced taints as key=value:NoExecute.
func (r *Rollout) TaintList() string {
	parts := make([]string, len(r.Taints))
	for i, t := range r.Taints {
		parts[i] = t.Key + "=" + t.Value + ":" + string(t.Effect)
	}
	return strings.Join(parts, ",")
}

// Gate says which targets of pool i are written in full this sync, given
// each one's progress (which it may mark Started, for a batch in flight),
// when the next batch is due, and what holds the rollout (holdOf).
type Gate func(i int, targets []nmsync.Target, progress []nmsync.Progress) (admit []bool, next time.Time, hold Hold)

// noNewBatch is the gate of a dry run and of the drift report at now: they
// finish what was started, as the controller would, start nothing, and say
// what would hold a batch.
func (d *Decision) noNewBatch(now time.Time) Gate {
	return func(i int, targets []nmsync.Target, progress []nmsync.Progress) ([]bool, time.Time, Hold) {
		paced := 0
		for _, pr := range progress {
			if pr != nmsync.ProgressExempt {
				paced++
			}
		}
		return nmsync.Admit(progress, 0), time.Time{}, holdOf(d.Pacing[i], targets, progress, d.Pacing[i].BatchSize(paced), now, nil)
	}
}

// Pace decides, for each pool to sync, the Desired each target is planned
// with: the pool's own, or the pool's with its NoExecute taints deferred
// where the rollout has not reached the target yet. It sets each paced
// pool's Rollout, with what holds it. Everything but adding or changing a
// NoExecute taint is planned at once.
func (d *Decision) Pace(targets [][]nmsync.Target, gate Gate) [][]nmsync.Desired {
	out := make([][]nmsync.Desired, len(targets))
	for i, desired := range d.Desired {
		if desired == nil {
			continue
		}
		out[i] = make([]nmsync.Desired, len(targets[i]))
		for j := range out[i] {
			out[i][j] = *desired
		}
		paced := nmsync.PacedTaints(*desired)
		if len(paced) == 0 {
			continue
		}
		progress := make([]nmsync.Progress, len(targets[i]))
		ro := &Rollout{Pacing: d.Pacing[i]}
		for j, t := range targets[i] {
			progress[j] = nmsync.ProgressOf(*desired, t)
			if progress[j] != nmsync.ProgressExempt {
				ro.Total++
			}
		}
		for _, p := range paced {
			// The taints being rolled out: not yet on every paced target.
			for j, t := range targets[i] {
				if progress[j] != nmsync.ProgressExempt && !nmsync.HeldBy(t, p) {
					ro.Taints = append(ro.Taints, p)
					break
				}
			}
		}
		ro.Batch = ro.Pacing.BatchSize(ro.Total)
		read := slices.Clone(progress) // as read from the spoke; the gate marks batches in flight
		admit, next, hold := gate(i, targets[i], progress)
		ro.Hold = hold
		for j, t := range targets[i] {
			out[i][j] = nmsync.PacedDesired(*desired, t, read[j], admit[j])
			switch {
			case !admit[j]:
				ro.Waiting = append(ro.Waiting, t.Machine.Name)
			case progress[j] == nmsync.ProgressPending:
				ro.Started = append(ro.Started, t.Machine.Name)
			case progress[j] == nmsync.ProgressStarted:
				ro.Finishing = append(ro.Finishing, t.Machine.Name)
			}
		}
		if len(ro.Waiting) > 0 {
			ro.NextBatch = next
		}
		if len(ro.Waiting) > 0 || len(ro.Started) > 0 || len(ro.Finishing) > 0 {
			// Until every paced target is Done on the spoke, the rollout is
			// under way: a pool without one has no Rollout.
			d.Results[i].Rollout = ro
		}
	}
	return out
}

// pacer is the controller's memory of its paced rollouts: when it last
// started a batch of each pool, and which Machines that batch took. It holds
// nothing that cannot be lost: progress is read from the spokes, and a
// controller that starts without this memory (a restart, a new leader) and
// finds a rollout under way waits one interval before its next batch.
type pacer struct {
	mu       gosync.Mutex
	clusters map[string]map[string]*paceState // cluster -> MachinePool name -> state
}

type paceState struct {
	taints string // the paced taints this state is about
	// last is when the writes of the last batch this process started
	// returned (landed), or, while this sync's are in flight, when it was
	// admitted; zero if none. The interval runs from it: a batch whose
	// writes land late (a loaded spoke, a slow webhook) does not shorten
	// the time evicted pods have to land somewhere before the next.
	last time.Time
	seen time.Time // when this process first saw the rollout under way
	// writing are the Machines of batches in flight that this sync writes
	// in full (admitted now, or retried): when their writes return, last
	// moves to that moment (landed).
	writing map[string]bool
	// inFlight are the Machines of the batches of taints: until they are
	// Done, they count as Started, so a batch whose writes failed is retried
	// without starting another.
	inFlight map[string]bool
	// done: nothing waits. The state is kept for last: a rollout that
	// follows at once (a new value, a taint added back) still waits the
	// interval after this one's last batch.
	done bool
	// held is the hold last reported with an Event (reason and Nodes).
	held string
	// admittedSick are the Machines of this rollout's batches whose Node was
	// NotReady or cordoned when taken: their state is not the rollout's
	// doing. Lost on a restart, after which such a Node holds the rollout
	// until it is Ready (the safe side).
	admittedSick map[string]bool
}

func newPacer() *pacer { return &pacer{clusters: map[string]map[string]*paceState{}} }

// gate is the live Gate of one sync of cluster ck at now.
func (p *pacer) gate(ck string, pools []string, d *Decision, now time.Time) Gate {
	return func(i int, targets []nmsync.Target, progress []nmsync.Progress) ([]bool, time.Time, Hold) {
		pacing := d.Pacing[i]
		taints := fmt.Sprint(nmsync.PacedTaints(*d.Desired[i]))
		p.mu.Lock()
		defer p.mu.Unlock()
		st := p.clusters[ck][pools[i]]
		var excused map[string]bool
		if st != nil && st.taints == taints {
			excused = st.admittedSick
		}
		if pacing.All {
			// Everything at once, no batches: nothing is taken sick, so nothing is excused.
			hold := holdOf(pacing, targets, progress, max(len(progress), 1), now, nil)
			if hold.Reason == "" {
				return nmsync.Admit(progress, len(progress)), time.Time{}, hold
			}
			if st == nil {
				p.state(ck, pools[i], taints) // kept only while held, to say a hold once (noteHold)
			}
			return nmsync.Admit(progress, 0), hold.Until, hold
		}
		if st != nil && st.taints != taints {
			// A new or changed spec: the rollout follows it. The interval after
			// the last batch still holds.
			st.taints, st.inFlight, st.seen, st.admittedSick = taints, map[string]bool{}, time.Time{}, nil
		}
		pending, paced, underWay := 0, 0, false
		if st != nil {
			st.writing = map[string]bool{}
		}
		for j, pr := range progress {
			if st != nil && st.inFlight[targets[j].Machine.Name] && pr != nmsync.ProgressDone && pr != nmsync.ProgressExempt {
				// A batch in flight whose writes have not all landed: written in
				// full again this sync, whatever else holds the rollout.
				st.writing[targets[j].Machine.Name] = true
				if pr == nmsync.ProgressPending {
					progress[j] = nmsync.ProgressStarted
				}
			}
			switch progress[j] {
			case nmsync.ProgressPending:
				pending++
			case nmsync.ProgressDone, nmsync.ProgressStarted:
				underWay = true
			}
			if progress[j] != nmsync.ProgressExempt {
				paced++
			}
		}
		hold := holdOf(pacing, targets, progress, pacing.BatchSize(paced), now, excused)
		if pending == 0 {
			return nmsync.Admit(progress, 0), time.Time{}, hold
		}
		if st == nil {
			st = p.state(ck, pools[i], taints)
		}
		st.done = false
		due := now
		switch {
		case !st.last.IsZero():
			due = st.last.Add(pacing.Interval)
		case underWay:
			// Under way, but not started by this process: it cannot know
			// when the last batch went, so it waits one whole interval.
			if st.seen.IsZero() {
				st.seen = now
			}
			due = st.seen.Add(pacing.Interval)
		}
		switch {
		case hold.Reason != "" && hold.Until.IsZero():
			// Held by the health gate: no batch is due until the Nodes are
			// Ready, and their watch events bring the cluster back then.
			return nmsync.Admit(progress, 0), time.Time{}, hold
		case hold.Until.After(due):
			due = hold.Until // the window opens later
		}
		batch := 0
		if !now.Before(due) && hold.Reason == "" {
			batch = pacing.BatchSize(paced)
		}
		// Ready, schedulable Nodes first: a sick one is taken only once no
		// healthy one waits, and is remembered as such (excused).
		healthy := make([]bool, len(targets))
		for j, t := range targets {
			healthy[j] = t.Node == nil || !nodeSick(t.Node)
		}
		admit := nmsync.AdmitPreferring(progress, batch, healthy)
		if st.writing == nil {
			st.writing = map[string]bool{}
		}
		for j, ok := range admit {
			if ok && progress[j] == nmsync.ProgressPending {
				name := targets[j].Machine.Name
				st.inFlight[name] = true
				if !healthy[j] {
					if st.admittedSick == nil {
						st.admittedSick = map[string]bool{}
					}
					st.admittedSick[name] = true
				}
				st.writing[name] = true
				st.last, due = now, now.Add(pacing.Interval)
			}
		}
		return admit, due, hold
	}
}

// landed moves the last batch of each pool whose sync wrote a batch in
// flight to at, the moment those writes returned, and its Rollout's next
// batch with it: the interval runs from when a batch's writes landed, not
// from when it was admitted. A write that was sent counts, whether or not
// it went through: one that timed out may still have landed, and the later
// time is the safe side.
func (p *pacer) landed(ck string, pools []hivev1.MachinePool, d *Decision, work []*poolWork, results [][][]nmsync.Result, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pw := range work {
		st := p.clusters[ck][pools[i].Name]
		if pw == nil || st == nil || len(st.writing) == 0 {
			continue
		}
		sent := false
		for j, w := range pw.targets {
			if st.writing[w.target.Machine.Name] && slices.ContainsFunc(results[i][j], func(r nmsync.Result) bool { return r.Requests > 0 }) {
				sent = true
				break
			}
		}
		st.writing = nil
		if !sent {
			continue
		}
		st.last = at
		// The gate's next batch was the later of the interval from admission and
		// a window's opening: the interval from landing can only move it later.
		if ro := d.Results[i].Rollout; ro != nil && !ro.NextBatch.IsZero() && at.Add(ro.Pacing.Interval).After(ro.NextBatch) {
			ro.NextBatch = at.Add(ro.Pacing.Interval)
		}
	}
}

// state makes the paceState of a pool's rollout of taints.
func (p *pacer) state(ck, pool, taints string) *paceState {
	st := &paceState{taints: taints, inFlight: map[string]bool{}}
	if p.clusters[ck] == nil {
		p.clusters[ck] = map[string]*paceState{}
	}
	p.clusters[ck][pool] = st
	return st
}

// noteHold records a pool's hold and reports whether it is news: a hold
// that begins or changes, said once with an Event.
func (p *pacer) noteHold(ck, pool string, h Hold) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.clusters[ck][pool]
	if st == nil {
		return false
	}
	key := ""
	if h.Reason != "" {
		key = h.Reason + ":" + strings.Join(h.Nodes, ",")
	}
	news := key != "" && key != st.held
	st.held = key
	return news
}

// finished marks a pool's rollout done once nothing waits, and reports
// whether it was under way until now (for the closing Event).
func (p *pacer) finished(ck, pool string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.clusters[ck][pool]
	if st == nil || st.done {
		return false
	}
	st.done, st.inFlight, st.seen, st.held, st.admittedSick = true, map[string]bool{}, time.Time{}, "", nil
	return true
}

func (p *pacer) forgetPool(ck, pool string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.clusters[ck], pool)
}

func (p *pacer) forget(c types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.clusters, c.String())
}

// rolloutEvents says what a sync did to a pool's rollout, as Event reasons
// and messages: the start of a rollout, a batch, its end.
func rolloutEvents(ro *Rollout, ended bool) (reasons, messages []string) {
	if startsRollout(ro) {
		reasons = append(reasons, EventNoExecuteStarted)
		messages = append(messages, fmt.Sprintf("rolling out %s to %d existing Node(s), %s: a NoExecute taint evicts the pods that do not tolerate it",
			ro.TaintList(), ro.Total, ro.Pacing))
	}
	if ro != nil && len(ro.Started) > 0 {
		next := "none, this was the last"
		if len(ro.Waiting) > 0 {
			next = ro.NextBatch.UTC().Format(time.RFC3339)
		}
		reasons = append(reasons, EventNoExecuteBatch)
		messages = append(messages, fmt.Sprintf("%s: batch of %d Node(s), Machines %s; %d/%d done; next batch: %s",
			ro.TaintList(), len(ro.Started), strings.Join(ro.Started, ", "), ro.Done(), ro.Total, next))
	}
	if ended {
		reasons = append(reasons, EventNoExecuteDone)
		messages = append(messages, "no Node of the pool waits for a NoExecute taint any more")
	}
	return reasons, messages
}

// startsRollout reports whether this sync's batch is a rollout's first: no
// paced target held the taints before it.
func startsRollout(ro *Rollout) bool {
	return ro != nil && len(ro.Started) > 0 && ro.Done() == len(ro.Started)
}
