package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/pkg/remote"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// DriftRow is one pool's line in the drift report.
type DriftRow struct {
	Cluster         string   `json:"cluster"` // namespace/name of the ClusterDeployment
	Pool            string   `json:"pool"`    // the MachinePool's name
	State           string   `json:"state"`   // InSync, Drifted, Refused, Paused, Unreachable
	Reason          string   `json:"reason,omitempty"`
	Machines        int      `json:"machines"`
	Nodes           int      `json:"nodes"`
	DriftedMachines int      `json:"driftedMachines"`
	DriftedNodes    int      `json:"driftedNodes"`
	SkippedNodes    int      `json:"skippedNodes"`
	Changes         []string `json:"changes,omitempty"`
	Message         string   `json:"message,omitempty"`
	// PendingNoExecute lists the pool's paced NoExecute taints that a
	// rollout has not brought to PendingNodes of its Nodes yet.
	PendingNoExecute string `json:"pendingNoExecute,omitempty"`
	PendingNodes     int    `json:"pendingNodes,omitempty"`
	// PendingHeld says why no batch would start now: the health gate's
	// NotReady Nodes, or when the pool's maintenance window next opens.
	PendingHeld string `json:"pendingHeld,omitempty"`
}

// DriftReport reads every ClusterDeployment and MachinePool on the hub and
// each eligible spoke once (live, through remote.DialReader) and plans, for
// every pool, what the controller would write. It writes nothing anywhere.
// secrets must be an uncached reader. At most concurrency spokes are read
// at once. Only the clusters of o's shard are read (o.InShard; every one
// when o sets no shards), and each spoke with o.Remote.
func DriftReport(ctx context.Context, hub, secrets client.Reader, o Options, concurrency int) ([]DriftRow, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	cds := &hivev1.ClusterDeploymentList{}
	if err := hub.List(ctx, cds); err != nil {
		return nil, fmt.Errorf("list ClusterDeployments: %w", err)
	}
	pools := &hivev1.MachinePoolList{}
	if err := hub.List(ctx, pools); err != nil {
		return nil, fmt.Errorf("list MachinePools: %w", err)
	}
	byCluster := map[string][]hivev1.MachinePool{}
	for _, mp := range pools.Items {
		k := clusterKey(mp.Namespace, mp.Spec.ClusterDeploymentRef.Name)
		byCluster[k] = append(byCluster[k], mp)
	}
	dial := func(ctx context.Context, cd *hivev1.ClusterDeployment) (client.Reader, func(), error) {
		return remote.DialReader(ctx, secrets, cd, o.Remote)
	}
	cds.Items = slices.DeleteFunc(cds.Items, func(cd hivev1.ClusterDeployment) bool { return !o.InShard(cd.Namespace, cd.Name) })
	rows := make([][]DriftRow, len(cds.Items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(concurrency, 1))
	for i := range cds.Items {
		cd := &cds.Items[i]
		g.Go(func() error {
			rows[i] = driftOfCluster(gctx, dial, cd, byCluster[clusterKey(cd.Namespace, cd.Name)])
			return nil
		})
	}
	_ = g.Wait()
	var out []DriftRow
	for _, r := range rows {
		out = append(out, r...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Cluster != out[j].Cluster {
			return out[i].Cluster < out[j].Cluster
		}
		return out[i].Pool < out[j].Pool
	})
	return out, ctx.Err()
}

// driftOfCluster is the controller's dry run of one cluster, read live:
// the same Decide, the same targets, and the same planner (an Applier in
// dry-run mode, which sends nothing), so each row says what the
// controller's status would say. dial reads a spoke live.
func driftOfCluster(ctx context.Context, dial func(context.Context, *hivev1.ClusterDeployment) (client.Reader, func(), error), cd *hivev1.ClusterDeployment, pools []hivev1.MachinePool) []DriftRow {
	if len(pools) == 0 {
		return nil
	}
	d := Decide(cd, pools, true)
	if d.NeedsSpoke {
		if reader, closeFn, err := dial(ctx, cd); err != nil {
			d.Unreachable(string(remote.ReasonOf(err)), err.Error())
		} else {
			defer closeFn()
			if objs, err := listSpoke(ctx, reader, d, false); err != nil {
				d.Unreachable(string(remote.ReasonOf(err)), err.Error())
			} else {
				targets := d.Targets(objs)
				paced := d.Pace(targets, d.noNewBatch(time.Now()))
				results := make([][][]nmsync.Result, len(pools))
				planner := &nmsync.Applier{DryRun: true}
				for i := range pools {
					if d.Desired[i] == nil {
						continue
					}
					for j, t := range targets[i] {
						results[i] = append(results[i], planner.SyncTarget(ctx, paced[i][j], t))
					}
				}
				d.Finish(results)
			}
		}
	}
	rows := make([]DriftRow, len(pools))
	for i, pr := range d.Results {
		rows[i] = driftRow(pr)
	}
	return rows
}

// driftRow is a pool's line: its status as the controller would write it,
// with the objects and the changes spelled out.
func driftRow(pr PoolResult) DriftRow {
	st := Status(pr)
	row := DriftRow{Cluster: pr.Cluster, Pool: pr.Pool, State: st.Phase, Reason: st.Reason, Message: st.Message, SkippedNodes: st.Skipped}
	if row.Reason == v1alpha1.ReasonDryRun {
		row.Reason = ""
	}
	changes := map[string]bool{}
	for _, r := range pr.Results {
		counted := r.Outcome != nmsync.OutcomeSkipped
		drifted := r.Outcome == nmsync.OutcomeWouldPatch
		switch {
		case r.Kind == nmsync.ResultKindMachine && counted:
			row.Machines++
			if drifted {
				row.DriftedMachines++
			}
		case r.Kind == nmsync.ResultKindNode && counted:
			row.Nodes++
			if drifted {
				row.DriftedNodes++
			}
		}
		if drifted {
			for _, c := range r.Changes {
				changes[describeChange(c)] = true
			}
		}
	}
	for c := range changes {
		row.Changes = append(row.Changes, c)
	}
	sort.Strings(row.Changes)
	if ro := pr.Rollout; ro != nil && len(ro.Waiting) > 0 {
		row.PendingNoExecute, row.PendingNodes, row.PendingHeld = ro.TaintList(), len(ro.Waiting), ro.Hold.Message
	}
	return row
}

// WriteDrift prints the drift report as a table or as JSON.
func WriteDrift(w io.Writer, rows []DriftRow, output string) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if rows == nil {
			rows = []DriftRow{}
		}
		return enc.Encode(rows)
	case "table":
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CLUSTER\tPOOL\tSTATE\tMACHINES\tDRIFTED\tNODES\tDRIFTED\tUNLINKED\tREASON\tCHANGES")
		for _, r := range rows {
			changes := strings.Join(r.Changes, "; ")
			if r.PendingNoExecute != "" {
				pending := fmt.Sprintf("paced NoExecute %s pending on %d Node(s)", r.PendingNoExecute, r.PendingNodes)
				if r.PendingHeld != "" {
					pending += " (" + r.PendingHeld + ")"
				}
				changes = strings.TrimSuffix(pending+"; "+changes, "; ")
			}
			if len(changes) > 120 {
				changes = changes[:117] + "..."
			}
			if changes == "" && r.Message != "" {
				changes = r.Message
				if len(changes) > 120 {
					changes = changes[:117] + "..."
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Cluster, r.Pool, r.State, r.Machines, r.DriftedMachines, r.Nodes, r.DriftedNodes, r.SkippedNodes, r.Reason, changes)
		}
		return tw.Flush()
	default:
		return fmt.Errorf("unknown output %q: want table or json", output)
	}
}
