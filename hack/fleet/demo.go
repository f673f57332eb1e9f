package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// runDemo runs the controller on the local fleet, changes pools, shows the
// fleet converging from the spokes' side, repairs drift, refuses a bad pool,
// prints the drift report and what the hub sent to each spoke.
func runDemo(ctx context.Context, f *localfleet.Fleet) error {
	logFile, err := os.Create(f.Dir() + "/controller.log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	controllerLog.set(logFile)
	fmt.Printf("\ncontroller log: %s\n", logFile.Name())

	// spoke-1 runs machine-api's real nodelink controller, as every
	// OpenShift cluster does: it copies Machine labels and taints onto Nodes
	// beside the hub's writes.
	if bin, err := localfleet.BuildTool("hack/nodelink.sh", "--cached"); err != nil {
		fmt.Println("machine-api's nodelink controller is not built yet, so no spoke runs it: `make nodelink` builds it (a few minutes on 2 cores), and the next run shows it beside the controller")
	} else if nl, err := f.Spokes()[0].RunNodelink(ctx, bin, 0); err != nil {
		fmt.Printf("nodelink not started (%v); the demo goes on without it\n", err)
	} else {
		defer nl.Stop()
		fmt.Printf("%s runs machine-api's nodelink controller (%s)\n", f.Spokes()[0].Name, bin)
	}

	cfg, err := controllerIdentity(ctx, f)
	if err != nil {
		return err
	}
	opts := fleet.Options{ResyncPeriod: time.Hour}
	mgr, _, err := fleet.NewManager(cfg, fleet.ManagerConfig{MetricsAddr: "127.0.0.1:0", ProbeAddr: "0"}, opts)
	if err != nil {
		return err
	}
	mctx, stopMgr := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		stopMgr()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "controller: %v\n", err)
		}
	}()
	hub := f.Hub.Client

	step("1. the controller starts and adopts what machine-api already copied")
	start := time.Now()
	if err := waitUntil(ctx, time.Minute, func() bool { return allPhase(ctx, hub, f, v1alpha1.PhaseInSync) }); err != nil {
		return err
	}
	fmt.Printf("every pool InSync after %s\n", time.Since(start).Round(time.Millisecond))
	printPools(ctx, hub)

	step("2. an SRE changes the pools on the hub (as OCM would): Hive updates MachineSet templates only")
	fmt.Println("   infra:   taint node-role.kubernetes.io/infra value reserved -> dedicated, add label example.com/maintenance=sunday")
	fmt.Println("   workers: label example.com/team payments -> checkout, machine label example.com/cost-center removed")
	for _, s := range f.Spokes() {
		if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
			spec.Taints[0].Value = "dedicated"
			spec.Labels["example.com/maintenance"] = "sunday"
		}); err != nil {
			return err
		}
		if _, err := s.UpdatePool(ctx, "workers", func(spec *hivev1.MachinePoolSpec) {
			spec.Labels["example.com/team"] = "checkout"
			spec.MachineLabels = nil
		}); err != nil {
			return err
		}
	}
	start = time.Now()
	if err := liveTable(ctx, f, start, func(n corev1.Node, pool string) bool {
		if pool == "infra" {
			return n.Labels["example.com/maintenance"] == "sunday" && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
				return t.Key == "node-role.kubernetes.io/infra" && t.Value == "dedicated"
			})
		}
		return n.Labels["example.com/team"] == "checkout"
	}); err != nil {
		return err
	}
	printPools(ctx, hub)

	step("3. someone removes a pool label from a Node on a spoke, by hand")
	s2 := f.Spokes()[min(1, len(f.Spokes())-1)]
	nodes, err := s2.Nodes(ctx, "infra")
	if err != nil || len(nodes) == 0 {
		return fmt.Errorf("nodes of %s: %w", s2.Name, err)
	}
	victim := nodes[0].Name
	if err := s2.RemoveNodeLabel(ctx, victim, "node-role.kubernetes.io/infra"); err != nil {
		return err
	}
	start = time.Now()
	if err := waitUntil(ctx, 30*time.Second, func() bool {
		n := &corev1.Node{}
		if s2.Admin.Get(ctx, types.NamespacedName{Name: victim}, n) != nil {
			return false
		}
		_, ok := n.Labels["node-role.kubernetes.io/infra"]
		return ok
	}); err != nil {
		return err
	}
	fmt.Printf("%s/%s: label restored after %s (other labels and taints untouched)\n", s2.Name, victim, time.Since(start).Round(time.Millisecond))

	step("4. a NoExecute taint, paced: 1 Node at a time, 3 s apart (the pool's noexecute-batch and noexecute-interval annotations);\n   the first Node it taints turns NotReady: the health gate holds the rollout until it is Ready again")
	if err := pacedRollout(ctx, hub, f.Spokes()[0]); err != nil {
		return err
	}

	step("5. a bad pool: an unknown taint effect and a reserved label key")
	s3 := f.Spokes()[len(f.Spokes())-1]
	if _, err := s3.UpdatePool(ctx, "workers", func(spec *hivev1.MachinePoolSpec) {
		spec.Taints = append(spec.Taints, corev1.Taint{Key: "example.com/batch", Value: "true", Effect: "NoScheduleAtAll"})
		spec.Labels["kubernetes.io/hostname"] = "all-the-same"
	}); err != nil {
		return err
	}
	if err := waitUntil(ctx, 30*time.Second, func() bool {
		st := &v1alpha1.MachinePoolSync{}
		return hub.Get(ctx, types.NamespacedName{Namespace: s3.Name, Name: s3.Name + "-workers"}, st) == nil && st.Status.Phase == v1alpha1.PhaseRefused
	}); err != nil {
		return err
	}
	st := &v1alpha1.MachinePoolSync{}
	_ = hub.Get(ctx, types.NamespacedName{Namespace: s3.Name, Name: s3.Name + "-workers"}, st)
	fmt.Printf("%s/workers refused, nothing written to its spoke:\n  %s\n", s3.Name, st.Status.Message)
	printPools(ctx, hub)

	step("6. the drift report (hub-controller drift), read-only")
	if err := printDrift(ctx, f); err != nil {
		fmt.Printf("drift report: %v\n", err)
	}

	step("7. what the hub sent each spoke (from the spokes' audit logs)")
	for _, s := range f.Spokes() {
		fmt.Printf("%-8s %s\n", s.Name, auditSummary(s.AuditLogPath))
	}
	fmt.Println("\nonly get/list/watch of MachineSets, Machines and Nodes, patches of Machines and Nodes, and GET /version.")
	fmt.Println("demo done.")
	return nil
}

func step(s string) { fmt.Printf("\n== %s\n", s) }

// pacedRollout adds a NoExecute taint to a pool paced 1 Node every 3 s, with
// a label in the same change, and prints the rollout as the pool's
// MachinePoolSync reports it. The first Node tainted turns NotReady (its
// Ready condition set False, as kubelet would) for 8 s: the health gate
// holds the next batch until it is Ready again.
func pacedRollout(ctx context.Context, hub client.Client, s *localfleet.Spoke) error {
	key := types.NamespacedName{Namespace: s.Name, Name: s.Name + "-workers"}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mp := &hivev1.MachinePool{}
		if err := hub.Get(ctx, key, mp); err != nil {
			return err
		}
		if mp.Annotations == nil {
			mp.Annotations = map[string]string{}
		}
		mp.Annotations[nmsync.AnnotationNoExecuteBatch] = "1"
		mp.Annotations[nmsync.AnnotationNoExecuteInterval] = "3s"
		return hub.Update(ctx, mp)
	}); err != nil {
		return err
	}
	fmt.Println("   workers: add taint example.com/dedicated=checkout:NoExecute and label example.com/lane=checkout")
	mp, err := s.UpdatePool(ctx, "workers", func(spec *hivev1.MachinePoolSpec) {
		spec.Labels["example.com/lane"] = "checkout"
		spec.Taints = append(spec.Taints, localfleet.Taint("example.com/dedicated", "checkout", corev1.TaintEffectNoExecute))
	})
	if err != nil {
		return err
	}
	start, last := time.Now(), ""
	var sickNode string
	var sickSince time.Time
	healed := false
	return waitUntil(ctx, 2*time.Minute, func() bool {
		st := &v1alpha1.MachinePoolSync{}
		if hub.Get(ctx, key, st) != nil || st.Status.ObservedGeneration < mp.Generation {
			return false
		}
		nodes, _ := s.Nodes(ctx, "workers")
		labelled, tainted := 0, 0
		for _, n := range nodes {
			if n.Labels["example.com/lane"] == "checkout" {
				labelled++
			}
			if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "example.com/dedicated" && t.Value == "checkout" }) {
				tainted++
			}
		}
		switch {
		case sickNode == "" && tainted == 1:
			i := slices.IndexFunc(nodes, func(n corev1.Node) bool {
				return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "example.com/dedicated" })
			})
			sickNode, sickSince = nodes[i].Name, time.Now()
			if err := s.SetNodeReady(ctx, sickNode, corev1.ConditionFalse); err != nil {
				fmt.Printf("   (could not set %s NotReady: %v)\n", sickNode, err)
			} else {
				fmt.Printf("  +%-8s %s turns NotReady\n", time.Since(start).Round(time.Millisecond), sickNode)
			}
		case sickNode != "" && !healed && time.Since(sickSince) > 8*time.Second:
			healed = true
			if err := s.SetNodeReady(ctx, sickNode, corev1.ConditionTrue); err == nil {
				fmt.Printf("  +%-8s %s is Ready again\n", time.Since(start).Round(time.Millisecond), sickNode)
			}
		}
		phase := st.Status.Phase
		if st.Status.Reason != "" {
			phase += "/" + st.Status.Reason
		}
		line := fmt.Sprintf("%s: label on %d/%d Nodes, taint on %d/%d", phase, labelled, len(nodes), tainted, len(nodes))
		if r := st.Status.Rollout; r != nil && r.NextBatchTime != nil {
			line += fmt.Sprintf("; status.rollout %s, next batch %s", r.Progress, r.NextBatchTime.UTC().Format("15:04:05"))
		}
		if line != last {
			fmt.Printf("  +%-8s %s\n", time.Since(start).Round(time.Millisecond), line)
			last = line
		}
		return st.Status.Phase == v1alpha1.PhaseInSync && tainted == len(nodes) && len(nodes) > 0
	})
}

func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func allPhase(ctx context.Context, hub client.Client, f *localfleet.Fleet, phase string) bool {
	list := &v1alpha1.MachinePoolSyncList{}
	if hub.List(ctx, list) != nil || len(list.Items) < 2*len(f.Spokes()) {
		return false
	}
	for _, s := range list.Items {
		if s.Status.Phase != phase {
			return false
		}
	}
	return true
}

// liveTable prints, until every Node of every pool satisfies ok, one line
// per change: how many Nodes per spoke already hold the new metadata, as
// read from the spokes themselves.
func liveTable(ctx context.Context, f *localfleet.Fleet, start time.Time, ok func(corev1.Node, string) bool) error {
	last := ""
	for {
		var parts []string
		doneAll := true
		for _, s := range f.Spokes() {
			good, total := 0, 0
			for _, pool := range []string{"infra", "workers"} {
				nodes, err := s.Nodes(ctx, pool)
				if err != nil {
					return err
				}
				for _, n := range nodes {
					total++
					if ok(n, pool) {
						good++
					}
				}
			}
			if good != total {
				doneAll = false
			}
			parts = append(parts, fmt.Sprintf("%s %d/%d", s.Name, good, total))
		}
		line := strings.Join(parts, "   ")
		if line != last {
			fmt.Printf("  +%-8s Nodes converged: %s\n", time.Since(start).Round(time.Millisecond), line)
			last = line
		}
		if doneAll {
			fmt.Printf("every Node converged after %s\n", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Since(start) > time.Minute {
			return fmt.Errorf("not converged within a minute")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func printPools(ctx context.Context, hub client.Client) {
	list := &v1alpha1.MachinePoolSyncList{}
	if err := hub.List(ctx, list); err != nil {
		fmt.Println("list MachinePoolSyncs:", err)
		return
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].Namespace+list.Items[i].Name < list.Items[j].Namespace+list.Items[j].Name
	})
	fmt.Println("\n$ kubectl get machinepoolsyncs -A")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tNAME\tCLUSTER\tPOOL\tPHASE\tSYNCED\tTOTAL\tDRIFTED\tROLLOUT\tNEXT BATCH\tREASON")
	for _, s := range list.Items {
		st := s.Status
		rollout, next := "", ""
		if r := st.Rollout; r != nil {
			rollout = r.Progress
			if r.NextBatchTime != nil {
				next = r.NextBatchTime.UTC().Format(time.RFC3339)
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", s.Namespace, s.Name, st.Cluster, st.Pool, st.Phase, st.Synced, st.Total, st.Drifted, rollout, next, st.Reason)
	}
	_ = w.Flush()
}

func auditSummary(path string) string {
	events, err := localfleet.ReadAudit(path)
	if err != nil {
		return err.Error()
	}
	counts := map[string]int{}
	for _, e := range events {
		if e.User.Username != localfleet.CredentialUser {
			continue // nodelink's own requests
		}
		what := e.ObjectRef.Resource
		if what == "" {
			what, _, _ = strings.Cut(e.RequestURI, "?")
		}
		counts[e.Verb+" "+what]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, counts[k]))
	}
	return strings.Join(parts, "  ")
}
