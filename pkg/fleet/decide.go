package fleet

import (
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/pkg/remote"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// Decision is the decision for one cluster's pools. Decide makes it from
// the hub's objects alone; the caller then reads the spoke only if
// NeedsSpoke, and completes it with Unreachable or with Targets and Finish.
// The controller, its dry run and `hub-controller drift` all go through it,
// so the three cannot disagree on which pools are synced and what their
// status says.
type Decision struct {
	// Results has one entry per pool, in the pools' order. Phase is set for
	// a pool that is not synced (paused, deleting, refused, ineligible,
	// unreachable), with Reason and Message.
	Results []PoolResult
	// Desired is the validated metadata of each pool to sync; nil for the others.
	Desired []*nmsync.Desired
	// Pacing is how each pool's NoExecute taints reach existing Nodes
	// (its annotations over nmsync.DefaultPacing).
	Pacing []nmsync.Pacing
	// State is the cluster's state (a State* constant), final unless NeedsSpoke.
	State string
	// NeedsSpoke says at least one pool is to be synced.
	NeedsSpoke bool
	anyRefused bool
}

// SpokeObjects is what the planner reads from one spoke.
type SpokeObjects struct {
	MachineSets []machinev1beta1.MachineSet
	Machines    []machinev1beta1.Machine
	Nodes       []corev1.Node
}

// Decide decides, from the ClusterDeployment and its MachinePools alone,
// which pools are synced and why the others are not: the cluster paused by
// annotation, the cluster ineligible (remote.Eligible: Hive's pause and
// relocate annotations, not installed, hibernating, unreachable...), a pool
// paused or being deleted, a pool refused by validation (of its spec or of
// its NoExecute pacing annotations). It does no I/O.
func Decide(cd *hivev1.ClusterDeployment, pools []hivev1.MachinePool, dryRun bool) *Decision {
	d := &Decision{Results: make([]PoolResult, len(pools)), Desired: make([]*nmsync.Desired, len(pools)), Pacing: make([]nmsync.Pacing, len(pools))}
	ck := clusterKey(cd.Namespace, cd.Name)
	for i := range pools {
		d.Results[i] = PoolResult{Cluster: ck, Pool: pools[i].Name, PoolName: pools[i].Spec.Name, Generation: pools[i].Generation, DryRun: dryRun}
	}
	if cd.Annotations[nmsync.AnnotationPaused] == "true" {
		d.setAll(v1alpha1.PhasePaused, v1alpha1.ReasonClusterPaused, "the ClusterDeployment has "+nmsync.AnnotationPaused+"=true")
		d.State = StatePaused
		return d
	}
	if ok, reason, msg := remote.Eligible(cd); !ok {
		d.setAll(v1alpha1.PhaseUnreachable, string(reason), msg)
		d.State = StateIneligible
		return d
	}
	for i := range pools {
		mp, out := &pools[i], &d.Results[i]
		switch {
		case mp.Annotations[nmsync.AnnotationPaused] == "true":
			out.Phase, out.Reason, out.Message = v1alpha1.PhasePaused, v1alpha1.ReasonPoolPaused, "the MachinePool has "+nmsync.AnnotationPaused+"=true"
		case !mp.DeletionTimestamp.IsZero():
			out.Phase, out.Reason, out.Message = v1alpha1.PhasePaused, v1alpha1.ReasonPoolDeleting, "the MachinePool is being deleted"
		default:
			desired, warnings, err := nmsync.DesiredFromPool(mp.Spec)
			out.Warnings = warnings
			if err != nil {
				out.Phase, out.Reason, out.Message = v1alpha1.PhaseRefused, RefusalReason(err), err.Error()
				d.anyRefused = true
				continue
			}
			pacing, err := nmsync.PacingFromAnnotations(mp.Annotations)
			if err != nil {
				out.Phase, out.Reason, out.Message = v1alpha1.PhaseRefused, RefusalReason(err), err.Error()
				d.anyRefused = true
				continue
			}
			d.Desired[i], d.Pacing[i] = &desired, pacing
			d.NeedsSpoke = true
		}
	}
	switch {
	case d.NeedsSpoke:
		d.State = "" // decided by Unreachable or Finish
	case d.anyRefused:
		d.State = StateRefused
	default:
		d.State = StateInSync
	}
	return d
}

// Unreachable completes the decision when the spoke cannot be read: every
// pool still undecided is Unreachable with the connection's reason.
func (d *Decision) Unreachable(reason, message string) {
	d.setAll(v1alpha1.PhaseUnreachable, reason, message)
	d.State = StateUnreachable
}

// Targets maps each pool to sync onto the spoke's objects (nil for the others).
func (d *Decision) Targets(objs SpokeObjects) [][]nmsync.Target {
	out := make([][]nmsync.Target, len(d.Results))
	for i, desired := range d.Desired {
		if desired != nil {
			out[i] = nmsync.Targets(d.Results[i].PoolName, objs.MachineSets, objs.Machines, objs.Nodes)
		}
	}
	return out
}

// Finish completes the decision with the results of syncing (or, in a dry
// run and the drift report, planning) each pool's targets, in the order of
// Targets, and sets the cluster's state.
func (d *Decision) Finish(results [][][]nmsync.Result) {
	d.State = StateInSync
	for i := range d.Results {
		if d.Desired[i] == nil {
			continue
		}
		for _, rs := range results[i] {
			d.Results[i].Results = append(d.Results[i].Results, rs...)
		}
		if Count(d.Results[i].Results).Drifted > 0 {
			d.State = StateDrifting
		}
	}
	if d.State == StateInSync && d.anyRefused {
		d.State = StateRefused
	}
}

func (d *Decision) setAll(phase, reason, msg string) {
	for i := range d.Results {
		if d.Results[i].Phase == "" {
			d.Results[i].Phase, d.Results[i].Reason, d.Results[i].Message = phase, reason, msg
		}
	}
}
