package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
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
}

// DriftReport reads every ClusterDeployment and MachinePool on the hub and
// each eligible spoke once (live, through remote.DialReader) and plans, for
// every pool, what the controller would write. It writes nothing anywhere.
// secrets must be an uncached reader. At most concurrency spokes are read
// at once.
func DriftReport(ctx context.Context, hub, secrets client.Reader, opts remote.Options, concurrency int) ([]DriftRow, error) {
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
	rows := make([][]DriftRow, len(cds.Items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(concurrency, 1))
	for i := range cds.Items {
		cd := &cds.Items[i]
		g.Go(func() error {
			rows[i] = driftOfCluster(gctx, secrets, cd, byCluster[clusterKey(cd.Namespace, cd.Name)], opts)
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

func driftOfCluster(ctx context.Context, secrets client.Reader, cd *hivev1.ClusterDeployment, pools []hivev1.MachinePool, opts remote.Options) []DriftRow {
	ck := clusterKey(cd.Namespace, cd.Name)
	rows := make([]DriftRow, len(pools))
	for i := range pools {
		rows[i] = DriftRow{Cluster: ck, Pool: pools[i].Name}
	}
	all := func(state, reason, msg string) []DriftRow {
		for i := range rows {
			if rows[i].State == "" {
				rows[i].State, rows[i].Reason, rows[i].Message = state, reason, msg
			}
		}
		return rows
	}
	if len(pools) == 0 {
		return nil
	}
	if cd.Annotations[AnnotationPaused] == "true" {
		return all(v1alpha1.PhasePaused, "ClusterPaused", "")
	}
	desired := make([]*nmsync.Desired, len(pools))
	for i := range pools {
		if pools[i].Annotations[AnnotationPaused] == "true" {
			rows[i].State, rows[i].Reason = v1alpha1.PhasePaused, "PoolPaused"
			continue
		}
		d, _, err := nmsync.DesiredFromPool(pools[i].Spec)
		if err != nil {
			rows[i].State, rows[i].Reason, rows[i].Message = v1alpha1.PhaseRefused, RefusalReason(err), err.Error()
			continue
		}
		desired[i] = &d
	}
	reader, closeFn, err := remote.DialReader(ctx, secrets, cd, opts)
	if err != nil {
		return all(v1alpha1.PhaseUnreachable, string(remote.ReasonOf(err)), err.Error())
	}
	defer closeFn()
	ms := &machinev1beta1.MachineSetList{}
	m := &machinev1beta1.MachineList{}
	n := &corev1.NodeList{}
	if err := readSpoke(ctx, reader, ms, m, n); err != nil {
		return all(v1alpha1.PhaseUnreachable, string(remote.ReasonOf(err)), err.Error())
	}
	for i := range pools {
		if desired[i] == nil {
			continue
		}
		changes := map[string]bool{}
		for _, t := range nmsync.Targets(pools[i].Spec.Name, ms.Items, m.Items, n.Items) {
			rows[i].Machines++
			if p := nmsync.PlanMachine(*desired[i], t.Machine); !p.InSync() {
				rows[i].DriftedMachines++
				for _, c := range p.Changes {
					changes[describeChange(c)] = true
				}
			}
			if t.Node == nil {
				rows[i].SkippedNodes++
				continue
			}
			rows[i].Nodes++
			if p := nmsync.PlanNode(*desired[i], t.Node); !p.InSync() {
				rows[i].DriftedNodes++
				for _, c := range p.Changes {
					changes[describeChange(c)] = true
				}
			}
		}
		for c := range changes {
			rows[i].Changes = append(rows[i].Changes, c)
		}
		sort.Strings(rows[i].Changes)
		rows[i].State = v1alpha1.PhaseInSync
		if rows[i].DriftedMachines+rows[i].DriftedNodes > 0 {
			rows[i].State = v1alpha1.PhaseDrifted
		}
	}
	return rows
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
