package fleet

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// PoolResult is everything one sync learned about one pool.
type PoolResult struct {
	// Cluster is the ClusterDeployment's namespace/name; Pool the MachinePool's
	// name and PoolName its spec.name.
	Cluster, Pool, PoolName string
	Generation              int64
	// Phase is set for pools that were not synced (refused, paused,
	// unreachable); empty when Results hold a sync.
	Phase, Reason, Message string
	Warnings               []string
	Results                []nmsync.Result
	DryRun                 bool
	// Rollout is set while the pool's NoExecute taints are paced: some
	// targets wait for them, or a batch started in this sync.
	Rollout *Rollout
	// KeepStatus says the result is no news: the spoke's first connection
	// attempt is in flight, so the pool's MachinePoolSync keeps what it says
	// (a restarted controller rewrites nothing that is still true).
	KeepStatus bool
	// WriteOutage is set while every write to the cluster's spoke fails
	// (outage.go): the message of a WriteFailed status, the same for the
	// whole outage.
	WriteOutage string
	// OutageReported: the outage began before this sync, and its failures
	// were reported then (Event, log); a failed probe does not repeat them.
	OutageReported bool
}

// Counts are the per-pool figures of a sync.
type Counts struct {
	Total, Synced, Drifted, Patched, Skipped, Failed, Conflicts, Overrides, Requests int
	// Denied counts the Failed objects the spoke refused (or that are held
	// after a refusal); Transient the other Failed and Conflict ones.
	Denied, Transient int
	// Contested counts the objects held after another writer kept undoing
	// the pool's metadata on them: not written, so not delivered (drifted).
	Contested int
	// Settling counts the Nodes changed back right after a write, left for
	// nodelink to catch up (drifted for a moment).
	Settling int
	// Outage counts the objects not written during a write outage, while
	// another one was probed (drifted).
	Outage int
	// DriftedByKind counts drifted objects by "Machine" and "Node".
	DriftedByKind map[string]int
	// PatchesByResult counts results by kind and outcome.
	PatchesByResult map[[2]string]int
}

// Count tallies a pool's results. An object is Synced when it needed
// nothing or was patched; Drifted when it still differs (dry run, conflict,
// failure); Skipped results (Nodes without a link) are neither synced nor
// counted in Total, except a Node held back by its Machine's failure and the
// objects held after a contest, which count as drifted.
func Count(results []nmsync.Result) Counts {
	c := Counts{DriftedByKind: map[string]int{}, PatchesByResult: map[[2]string]int{}}
	for _, r := range results {
		c.Requests += r.Requests
		c.Conflicts += r.Conflicts
		c.PatchesByResult[[2]string{r.Kind, string(r.Outcome)}]++
		for _, ch := range r.Changes {
			if ch.Op == nmsync.OpOverride {
				c.Overrides++
			}
		}
		switch r.Outcome {
		case nmsync.OutcomeInSync:
			c.Total++
			c.Synced++
		case nmsync.OutcomePatched:
			c.Total++
			c.Synced++
			c.Patched++
		case nmsync.OutcomeWouldPatch:
			c.Total++
			c.Drifted++
			c.DriftedByKind[r.Kind]++
		case nmsync.OutcomeConflict, nmsync.OutcomeFailed:
			c.Total++
			c.Drifted++
			c.Failed++
			c.DriftedByKind[r.Kind]++
			if r.Reason == nmsync.ReasonDenied {
				c.Denied++
			} else {
				c.Transient++
			}
		case nmsync.OutcomeSkipped:
			switch r.Reason {
			case nmsync.ReasonSettling, v1alpha1.ReasonContested, nmsync.ReasonMachineNotSynced, ReasonWriteOutage:
				// Not written, and not delivered: drifted.
				c.Total++
				c.Drifted++
				c.DriftedByKind[r.Kind]++
				switch r.Reason {
				case nmsync.ReasonSettling:
					c.Settling++
				case v1alpha1.ReasonContested:
					c.Contested++
				case ReasonWriteOutage:
					c.Outage++
				}
			default:
				if r.Name != "" || r.Reason != "" {
					c.Skipped++
				}
			}
		}
	}
	return c
}

// Status computes the MachinePoolSync status of a pool from its result.
// Times are set by the caller.
func Status(pr PoolResult) v1alpha1.MachinePoolSyncStatus {
	st := v1alpha1.MachinePoolSyncStatus{
		Cluster:            clusterName(pr.Cluster),
		Pool:               pr.PoolName,
		ObservedGeneration: pr.Generation,
		Phase:              pr.Phase,
		Reason:             pr.Reason,
		Message:            truncate(pr.Message, 1024),
	}
	if pr.Phase != "" {
		return st
	}
	c := Count(pr.Results)
	st.Total, st.Synced, st.Drifted, st.Patched, st.Skipped, st.Overrides = c.Total, c.Synced, c.Drifted, c.Patched, c.Skipped, c.Overrides
	ro := pr.Rollout
	if ro != nil && len(ro.Waiting) > 0 {
		st.Rollout = rolloutStatus(ro)
	}
	switch {
	case c.Contested > 0 && c.Failed == 0 && c.Outage == 0 && !pr.DryRun:
		// Held, not failed: say so, and which objects, rather than InSync.
		st.Phase, st.Reason = v1alpha1.PhaseContested, v1alpha1.ReasonContested
		st.Message = truncate(fmt.Sprintf("%d object(s) not written for a while: another writer kept undoing this pool's metadata on them: %s",
			c.Contested, strings.Join(contestedNames(pr.Results), ", ")), 1024)
	case c.Drifted == 0 && st.Rollout != nil:
		// Not InSync: the pool is not delivered until the last batch.
		st.Phase, st.Reason = v1alpha1.PhaseRollingOut, v1alpha1.ReasonNoExecutePaced
		st.Message = fmt.Sprintf("%s reaches existing Nodes %s: %d/%d done", ro.TaintList(), ro.Pacing, ro.Done(), ro.Total)
		if h := ro.Hold; h.Reason != "" {
			st.Reason = h.Reason
			st.Message = truncate(st.Message+"; "+h.Message, 1024)
		}
		if pr.DryRun {
			st.Message = "dry run: " + st.Message
		}
	case c.Drifted == 0:
		st.Phase = v1alpha1.PhaseInSync
	default:
		st.Phase = v1alpha1.PhaseDrifted
		switch {
		case pr.DryRun && c.Failed == 0:
			st.Reason = v1alpha1.ReasonDryRun
		case c.Denied > 0:
			// Named apart: retrying cannot fix it, someone must look.
			st.Reason = v1alpha1.ReasonWriteDenied
			st.Message = truncate(fmt.Sprintf("%d object(s) denied by the spoke, retried on a slow cadence; %s", c.Denied, firstDenial(pr.Results)), 1024)
		case pr.WriteOutage != "":
			st.Reason = v1alpha1.ReasonWriteFailed
			st.Message = truncate(pr.WriteOutage, 1024)
		default:
			st.Reason = v1alpha1.ReasonWriteFailed
			st.Message = truncate(firstError(pr.Results), 1024)
		}
	}
	if st.Message == "" && len(pr.Warnings) > 0 {
		// Items accepted with a correction or ignored, as Hive does (duplicate
		// taints, machine labels that clash with machine-api's own).
		st.Message = truncate(strings.Join(pr.Warnings, "; "), 1024)
	}
	return st
}

// ChangeSummary describes the writes of one sync for an Event: how many
// objects of each kind were patched, and the distinct changes made.
func ChangeSummary(results []nmsync.Result) string {
	patched := map[string]int{}
	changes := map[string]bool{}
	for _, r := range results {
		if r.Outcome != nmsync.OutcomePatched && r.Outcome != nmsync.OutcomeWouldPatch {
			continue
		}
		patched[r.Kind]++
		for _, ch := range r.Changes {
			changes[describeChange(ch)] = true
		}
	}
	if len(patched) == 0 {
		return ""
	}
	var kinds []string
	for _, k := range []string{nmsync.ResultKindMachine, nmsync.ResultKindNode} {
		if n := patched[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%d %s%s", n, k, plural(n)))
		}
	}
	list := make([]string, 0, len(changes))
	for c := range changes {
		list = append(list, c)
	}
	sort.Strings(list)
	if len(list) > 12 {
		list = append(list[:12], fmt.Sprintf("and %d more", len(list)-12))
	}
	return strings.Join(kinds, ", ") + ": " + strings.Join(list, "; ")
}

func describeChange(ch nmsync.Change) string {
	kind := map[nmsync.Kind]string{nmsync.KindMachineLabel: "machine label", nmsync.KindNodeLabel: "label", nmsync.KindTaint: "taint"}[ch.Kind]
	switch ch.Op {
	case nmsync.OpAdd:
		return fmt.Sprintf("add %s %s=%s", kind, ch.Key, ch.To)
	case nmsync.OpUpdate:
		return fmt.Sprintf("update %s %s %q->%q", kind, ch.Key, ch.From, ch.To)
	case nmsync.OpOverride:
		return fmt.Sprintf("override %s %s %q->%q (set by someone else)", kind, ch.Key, ch.From, ch.To)
	case nmsync.OpRemove:
		return fmt.Sprintf("remove %s %s", kind, ch.Key)
	case nmsync.OpAdopt:
		return fmt.Sprintf("adopt %s %s", kind, ch.Key)
	case nmsync.OpRelease:
		return fmt.Sprintf("keep %s %s (also set by %s)", kind, ch.Key, strings.Join(ch.With, ", "))
	default:
		return fmt.Sprintf("%s %s %s", strings.ToLower(string(ch.Op)), kind, ch.Key)
	}
}

// rolloutStatus is the status of a paced rollout. The next batch time is
// kept to the second, as the API server stores it, so that an unchanged
// rollout compares equal to its stored status.
func rolloutStatus(ro *Rollout) *v1alpha1.RolloutStatus {
	rs := &v1alpha1.RolloutStatus{
		Taints: ro.TaintList(), Progress: fmt.Sprintf("%d/%d", ro.Done(), ro.Total),
		Done: ro.Done(), Total: ro.Total, Batch: ro.Batch, Interval: ro.Pacing.Interval.String(),
	}
	if !ro.NextBatch.IsZero() {
		t := metav1.NewTime(ro.NextBatch.Truncate(time.Second))
		rs.NextBatchTime = &t
	}
	return rs
}

func contestedNames(results []nmsync.Result) []string {
	var out []string
	for _, r := range results {
		if r.Outcome == nmsync.OutcomeSkipped && r.Reason == v1alpha1.ReasonContested {
			out = append(out, r.Kind+" "+r.Name)
		}
	}
	return out
}

func firstDenial(results []nmsync.Result) string {
	for _, r := range results {
		if r.Reason == nmsync.ReasonDenied && r.Err != nil {
			return fmt.Sprintf("%s %s: %v", r.Kind, r.Name, r.Err)
		}
	}
	return ""
}

func firstTransient(results []nmsync.Result) string {
	var rest []nmsync.Result
	for _, r := range results {
		if r.Reason != nmsync.ReasonDenied {
			rest = append(rest, r)
		}
	}
	return firstError(rest)
}

func firstError(results []nmsync.Result) string {
	for _, r := range results {
		if r.Err != nil && r.Outcome != nmsync.OutcomeSkipped {
			return fmt.Sprintf("%s %s: %v", r.Kind, r.Name, r.Err)
		}
	}
	for _, r := range results {
		if r.Outcome == nmsync.OutcomeConflict {
			return fmt.Sprintf("%s %s: gave up after %d conflicts", r.Kind, r.Name, r.Conflicts)
		}
	}
	return ""
}

// RefusalReason returns a stable reason code for a pool validation error.
func RefusalReason(err error) string {
	var ve *nmsync.ValidationError
	if errors.As(err, &ve) && len(ve.Problems) > 0 {
		return ve.Problems[0].Code
	}
	return "Invalid"
}

func clusterName(key string) string {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[i+1:]
	}
	return key
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
