package int_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// The paced taint of these tests, and its pacing.
const (
	gpuKey        = "example.com/gpu"
	pacedBatch    = 2
	pacedInterval = 5 * time.Second
	pacedNodes    = 10
)

var pacedKeys = map[string]bool{"node-role.kubernetes.io/infra": true, gpuKey: true, "example.com/lane": true, "example.com/base": true}

// addPacedPool adds a 10-Node infra pool paced 2 Nodes every 5 s. Its
// Machines and Nodes already hold one NoExecute taint (example.com/base),
// which must not make a second one's rollout look under way.
func addPacedPool(t *testing.T, ctx context.Context, s *localfleet.Spoke) {
	t.Helper()
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "infra").
		WithReplicas(pacedNodes).
		WithLabels(map[string]string{"node-role.kubernetes.io/infra": ""}).
		WithTaints(localfleet.Taint("node-role.kubernetes.io/infra", "reserved", corev1.TaintEffectNoSchedule),
			localfleet.Taint("example.com/base", "1", corev1.TaintEffectNoExecute)).
		WithAnnotation(nmsync.AnnotationNoExecuteBatch, fmt.Sprint(pacedBatch)).
		WithAnnotation(nmsync.AnnotationNoExecuteInterval, pacedInterval.String())); err != nil {
		t.Fatal(err)
	}
}

// setGPUTaint makes the pool declare gpuKey=value:NoExecute ("" drops it),
// with the label example.com/lane=gpu in the same change, and returns the
// pool's new generation.
func setGPUTaint(t *testing.T, ctx context.Context, s *localfleet.Spoke, value string) int64 {
	t.Helper()
	mp, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
		spec.Labels["example.com/lane"] = "gpu"
		spec.Taints = slices.DeleteFunc(spec.Taints, func(x corev1.Taint) bool { return x.Key == gpuKey })
		if value != "" {
			spec.Taints = append(spec.Taints, localfleet.Taint(gpuKey, value, corev1.TaintEffectNoExecute))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return mp.Generation
}

// eventCount counts the Events of a reason on the pool, with their series.
func eventCount(t *testing.T, ctx context.Context, f *localfleet.Fleet, s *localfleet.Spoke, reason string) int {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := f.Hub.Client.List(ctx, list, client.InNamespace(s.Name)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Regarding.Name == s.Name+"-infra" && e.Reason == reason {
			n += max(1, int(ptr.Deref(e.Series, eventsv1.EventSeries{}).Count))
		}
	}
	return n
}

// gpuTainted counts the pool's Nodes with gpuKey:NoExecute of value ("" for
// any value).
func gpuTainted(ctx context.Context, s *localfleet.Spoke, value string) int {
	nodes, _ := s.Nodes(ctx, "infra")
	n := 0
	for _, node := range nodes {
		if slices.ContainsFunc(node.Spec.Taints, func(x corev1.Taint) bool {
			return x.Key == gpuKey && x.Effect == corev1.TaintEffectNoExecute && (value == "" || x.Value == value)
		}) {
			n++
		}
	}
	return n
}

// pacedWrite is the first patch that gave one Machine+Node pair the paced
// taint: the earlier of the Machine's and the Node's, read from the spoke's
// audit log (patches of Nodes and Machines are recorded with their body).
type pacedWrite struct {
	machine           string
	machineAt, nodeAt time.Time
}

func (w pacedWrite) at() time.Time {
	if w.nodeAt.IsZero() || (!w.machineAt.IsZero() && w.machineAt.Before(w.nodeAt)) {
		return w.machineAt
	}
	return w.nodeAt
}

// pacedWrites reads, from the audit entries after skip, when each pair of
// the pool first got gpuKey=value:NoExecute.
func pacedWrites(t *testing.T, ctx context.Context, s *localfleet.Spoke, skip int, value string) []pacedWrite {
	t.Helper()
	machines, err := s.Machines(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string]string{}
	pairs := map[string]*pacedWrite{}
	for _, m := range machines {
		pairs[m.Name] = &pacedWrite{machine: m.Name}
		if m.Status.NodeRef != nil {
			byNode[m.Status.NodeRef.Name] = m.Name
		}
	}
	for _, e := range readAudit(t, s.AuditLogPath)[skip:] {
		if e.Verb != "patch" || len(e.RequestObject) == 0 || e.ResponseStatus.Code != 200 {
			continue
		}
		var body struct {
			Spec struct {
				Taints []corev1.Taint `json:"taints"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(e.RequestObject, &body); err != nil {
			t.Fatalf("audit requestObject: %v", err)
		}
		if !slices.ContainsFunc(body.Spec.Taints, func(x corev1.Taint) bool {
			return x.Key == gpuKey && x.Effect == corev1.TaintEffectNoExecute && x.Value == value
		}) {
			continue
		}
		switch e.ObjectRef.Resource {
		case "machines":
			if p := pairs[e.ObjectRef.Name]; p != nil && p.machineAt.IsZero() {
				p.machineAt = e.StageTimestamp
			}
		case "nodes":
			if p := pairs[byNode[e.ObjectRef.Name]]; p != nil && p.nodeAt.IsZero() {
				p.nodeAt = e.StageTimestamp
			}
		}
	}
	var out []pacedWrite
	for _, p := range pairs {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at().Before(out[j].at()) })
	return out
}

// checkBatches asserts, on the audit log's times, that the pairs got the
// taint in batches of at most batch, and that each batch's first write came
// at least interval after the last write of the one before landed, its
// Machines' and Nodes' both (the interval runs from landed writes). A pair
// is in the batch of its first write; on a busy machine its Node's patch can
// land seconds after its Machine's, and what keeps the two in one batch is
// that both land before the next batch begins, which that gap checks. It
// returns the batches' start times.
func checkBatches(t *testing.T, writes []pacedWrite, batch int, interval time.Duration) []time.Time {
	t.Helper()
	var starts, ends []time.Time
	var sizes []int
	for _, w := range writes {
		if w.machineAt.IsZero() || w.nodeAt.IsZero() {
			t.Errorf("Machine %s: no patch gave the taint to both it (%s) and its Node (%s)", w.machine, w.machineAt, w.nodeAt)
			continue
		}
		if len(starts) == 0 || w.at().Sub(starts[len(starts)-1]) > interval/2 {
			starts = append(starts, w.at())
			ends = append(ends, time.Time{})
			sizes = append(sizes, 0)
		}
		sizes[len(sizes)-1]++
		for _, at := range []time.Time{w.machineAt, w.nodeAt} {
			if at.After(ends[len(ends)-1]) {
				ends[len(ends)-1] = at
			}
		}
	}
	var gaps []string
	for i, n := range sizes {
		if n > batch {
			t.Errorf("batch %d took %d Machine+Node pairs, want at most %d", i+1, n, batch)
		}
		if i > 0 {
			gap := starts[i].Sub(ends[i-1])
			gaps = append(gaps, gap.Round(time.Millisecond).String())
			switch {
			case gap < 0:
				t.Errorf("a Machine or Node of batch %d landed %s after batch %d began: a pair split across batches", i, -gap, i+1)
			case gap < interval:
				t.Errorf("batch %d began %s after batch %d's last write landed, want at least %s", i+1, gap, i, interval)
			}
		}
	}
	t.Logf("paced writes from the audit log: %d batches of %v pairs, each begun %v after the last write of the one before", len(sizes), sizes, gaps)
	return starts
}

func hasRolloutEvents(ctx context.Context, f *localfleet.Fleet, s *localfleet.Spoke, reasons ...string) bool {
	for _, r := range reasons {
		if !hasEvent(ctx, f.Hub.Client, s.Name, s.Name+"-infra", r) {
			return false
		}
	}
	return true
}

// TestNoExecutePacedRollout: a NoExecute taint reaches a 10-Node pool 2
// Nodes at a time, 5 s apart, while the rest of the same change applies at
// once; the status, Events and drift report follow it; dropping the taint
// mid-rollout removes it everywhere at once; "all" opts out of pacing; a bad
// pacing annotation is refused and writes nothing.
func TestNoExecutePacedRollout(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addPacedPool(t, ctx, s)
	startInSync(t, ctx, f, testOptions(), s)
	others := noteForeign(t, ctx, s, "infra", pacedKeys)
	skip := auditLines(t, s)

	// The maintenance window is closed when the taint is declared, so what
	// is checked during the rollout is read while it is under way, however
	// slow the machine: nothing starts until the window goes.
	setPoolAnnotation(t, ctx, f.Hub.Client, s, "infra", nmsync.AnnotationNoExecuteWindow, closedWindow(time.Now()))
	setGPUTaint(t, ctx, s, "true")
	waitFor(t, "the label of the same change on all 10 Nodes", 4*time.Second, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel("example.com/lane", "gpu"))
	})
	var st *v1alpha1.MachinePoolSync
	waitFor(t, "status RollingOut, held by the window", 10*time.Second, func() bool {
		var err error
		st, err = poolSync(ctx, f.Hub.Client, s, "infra")
		return err == nil && st.Status.Phase == v1alpha1.PhaseRollingOut && st.Status.Rollout != nil &&
			st.Status.Reason == v1alpha1.ReasonOutsideWindow && st.Status.Rollout.NextBatchTime != nil
	})
	t.Logf("status: %s %s, rollout %+v", st.Status.Phase, st.Status.Message, *st.Status.Rollout)
	if r := st.Status.Rollout; r.Total != pacedNodes || r.Batch != pacedBatch || r.Done != 0 || r.Taints != gpuKey+"=true:NoExecute" {
		t.Errorf("rollout status %+v", *r)
	}
	// The drift report lists the paced taint as pending, and why.
	rows := driftRows(t, ctx, f)
	if len(rows) != 1 {
		t.Fatalf("drift -o json: want 1 row, got %+v", rows)
	}
	if r := rows[0]; r.State != v1alpha1.PhaseRollingOut || r.PendingNoExecute != gpuKey+"=true:NoExecute" || r.PendingNodes != pacedNodes || !strings.Contains(r.PendingHeld, "window") {
		t.Errorf("drift row during the rollout: %+v", r)
	}
	if n := gpuTainted(ctx, s, ""); n != 0 {
		t.Errorf("%d Nodes tainted outside the window, want 0", n)
	}

	// The window goes: the batches start.
	setPoolAnnotation(t, ctx, f.Hub.Client, s, "infra", nmsync.AnnotationNoExecuteWindow, "")
	opened := time.Now()
	waitFor(t, "the first batch", 10*time.Second, func() bool { return gpuTainted(ctx, s, "true") >= 1 })
	if n, since := gpuTainted(ctx, s, "true"), time.Since(opened); since < pacedInterval-time.Second && n > pacedBatch {
		t.Errorf("%d Nodes tainted %s after the window went, want at most %d before the interval", n, since, pacedBatch)
	}
	waitFor(t, "all 10 Nodes tainted", 4*pacedInterval+10*time.Second, func() bool { return gpuTainted(ctx, s, "true") == pacedNodes })
	starts := checkBatches(t, pacedWrites(t, ctx, s, skip, "true"), pacedBatch, pacedInterval)
	if len(starts) != pacedNodes/pacedBatch {
		t.Errorf("%d batches, want %d", len(starts), pacedNodes/pacedBatch)
	}
	if span := starts[len(starts)-1].Sub(starts[0]); span > 4*pacedInterval+3*time.Second {
		t.Errorf("first to last batch took %s, want about %s", span, 4*pacedInterval)
	}
	waitInSync(t, ctx, f, s, 10*time.Second)
	waitFor(t, "Events: start, batches, end", 5*time.Second, func() bool {
		return hasRolloutEvents(ctx, f, s, fleet.EventNoExecuteStarted, fleet.EventNoExecuteBatch, fleet.EventNoExecuteDone)
	})
	time.Sleep(time.Second) // let any late Event land
	if started, done := eventCount(t, ctx, f, s, fleet.EventNoExecuteStarted), eventCount(t, ctx, f, s, fleet.EventNoExecuteDone); started != 1 || done != 1 {
		t.Errorf("one rollout: %d %s and %d %s Events, want 1 of each", started, fleet.EventNoExecuteStarted, done, fleet.EventNoExecuteDone)
	}

	// A value change is paced too; dropping the taint mid-rollout removes it
	// from every Node at once, whichever value it had.
	valueChange := time.Now()
	if since := valueChange.Sub(starts[len(starts)-1]); since >= pacedInterval {
		t.Logf("the value change came %s after the last batch: the interval after it is not exercised", since)
	}
	setGPUTaint(t, ctx, s, "v2")
	waitFor(t, "the first batch of the value change", 10*time.Second, func() bool { return gpuTainted(ctx, s, "v2") >= 1 })
	if n := gpuTainted(ctx, s, "v2"); n > pacedBatch {
		t.Errorf("%d Nodes changed in the first batch, want at most %d", n, pacedBatch)
	}
	// ... and it waits the interval after the last batch of the rollout before.
	for _, w := range pacedWrites(t, ctx, s, skip, "v2") {
		if !w.at().IsZero() {
			if gap := w.at().Sub(starts[len(starts)-1]); gap < pacedInterval-300*time.Millisecond {
				t.Errorf("the value change's first batch came %s after the last batch before it, want at least %s", gap, pacedInterval)
			}
			break
		}
	}
	setGPUTaint(t, ctx, s, "")
	waitFor(t, "the dropped taint gone from every Node", 3*time.Second, func() bool { return gpuTainted(ctx, s, "") == 0 })
	waitInSync(t, ctx, f, s, 10*time.Second)

	// batch "all": everything at once, as without pacing.
	setPoolAnnotation(t, ctx, f.Hub.Client, s, "infra", nmsync.AnnotationNoExecuteBatch, "all")
	skipAll := auditLines(t, s)
	setGPUTaint(t, ctx, s, "all")
	waitFor(t, "batch all: every Node at once", 3*time.Second, func() bool { return gpuTainted(ctx, s, "all") == pacedNodes })
	if starts := checkBatches(t, pacedWrites(t, ctx, s, skipAll, "all"), pacedNodes, pacedInterval); len(starts) != 1 {
		t.Errorf("batch all: %d batches, want 1", len(starts))
	}

	// A bad value is refused, with a reason, and nothing is written.
	waitInSync(t, ctx, f, s, 10*time.Second)
	setPoolAnnotation(t, ctx, f.Hub.Client, s, "infra", nmsync.AnnotationNoExecuteInterval, "soon")
	skipBad := auditLines(t, s)
	gen := setGPUTaint(t, ctx, s, "refused")
	waitFor(t, "a bad interval refused", 5*time.Second, func() bool {
		st, err := poolSync(ctx, f.Hub.Client, s, "infra")
		return err == nil && st.Status.ObservedGeneration >= gen && st.Status.Phase == v1alpha1.PhaseRefused &&
			st.Status.Reason == nmsync.CodeInvalidPacing && strings.Contains(st.Status.Message, nmsync.AnnotationNoExecuteInterval)
	})
	time.Sleep(time.Second)
	if n, _, _ := hubPatches(t, s, skipBad); n != 0 {
		t.Errorf("a refused pool was written: %d patches", n)
	}
	if !hasEvent(ctx, f.Hub.Client, s.Name, s.Name+"-infra", fleet.EventRefused) {
		t.Error("no Refused Event for the bad annotation")
	}
	setGPUTaint(t, ctx, s, "")
	setPoolAnnotation(t, ctx, f.Hub.Client, s, "infra", nmsync.AnnotationNoExecuteInterval, "")
	waitInSync(t, ctx, f, s, 10*time.Second)
	others.assertKept(t, ctx)
}

// closedWindow is a maintenance window that is closed at now and stays
// closed for about 12 hours: a minute a day, half a day away.
func closedWindow(now time.Time) string {
	at := now.UTC().Add(12 * time.Hour)
	return fmt.Sprintf("schedule=%d %d * * *; duration=1m", at.Minute(), at.Hour())
}

// TestNoExecuteIntervalRunsFromLandedWrites: a slow admission webhook holds
// every Node write 1.5 s, so each batch's Node writes land well after its
// Machine writes and after the batch was admitted. The interval runs from
// the landed writes: no batch's first write comes sooner than the interval
// after the last write of the batch before.
func TestNoExecuteIntervalRunsFromLandedWrites(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addPacedPool(t, ctx, s)
	startInSync(t, ctx, f, testOptions(), s)
	const delay = 1500 * time.Millisecond
	wh, err := s.StartWebhook(ctx, func(c localfleet.AdmissionCall) localfleet.Verdict {
		if c.Resource == "nodes" {
			return localfleet.Verdict{Delay: delay}
		}
		return localfleet.Verdict{}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wh.Close(context.WithoutCancel(ctx)) }) // the test's context is done when cleanups run
	skip := auditLines(t, s)

	setGPUTaint(t, ctx, s, "true")
	waitFor(t, "all 10 Nodes tainted", 4*pacedInterval+30*time.Second, func() bool { return gpuTainted(ctx, s, "true") == pacedNodes })
	writes := pacedWrites(t, ctx, s, skip, "true")
	for _, w := range writes {
		if d := w.nodeAt.Sub(w.machineAt); d < delay {
			t.Errorf("Machine %s: its Node's write landed %s after the Machine's, want at least the webhook's %s", w.machine, d, delay)
		}
	}
	if starts := checkBatches(t, writes, pacedBatch, pacedInterval); len(starts) != pacedNodes/pacedBatch {
		t.Errorf("%d batches, want %d", len(starts), pacedNodes/pacedBatch)
	}
	waitInSync(t, ctx, f, s, 10*time.Second)
}

// TestNoExecutePacingAcrossLeaderChangeAndRestart: two replicas run the
// rollout; the leader is SIGKILLed mid-rollout and the other takes over,
// then that one is SIGKILLed and a new process starts. No batch is larger
// than asked, none comes sooner than the interval after the one before,
// nothing is lost, and the rollout completes.
func TestNoExecutePacingAcrossLeaderChangeAndRestart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addPacedPool(t, ctx, s)
	kc := controllerKubeconfig(t, ctx, f)
	leader, follower := startPair(t, kc, leaseFlags...)
	waitInSync(t, ctx, f, s, time.Minute)
	others := noteForeign(t, ctx, s, "infra", pacedKeys)
	skip := auditLines(t, s)

	setGPUTaint(t, ctx, s, "true")
	waitFor(t, "two batches", 2*pacedInterval, func() bool { return gpuTainted(ctx, s, "true") >= 2*pacedBatch })
	m, _ := leader.scrape()
	t.Logf("leader's pending metric: %s", metricLine(m, "hub_node_metadata_noexecute_pending_nodes"))
	if !strings.Contains(m, fmt.Sprintf("hub_node_metadata_noexecute_pending_nodes{cluster=%q,pool=%q,reason=\"paced\"} ", s.Key().String(), s.Name+"-infra")) {
		t.Errorf("the leader does not report the pool's pending Nodes")
	}
	kill(t, leader)
	t.Logf("leader killed with %d of 10 Nodes tainted", gpuTainted(ctx, s, "true"))
	waitFor(t, "the other replica takes over and runs a batch", time.Minute, func() bool { return gpuTainted(ctx, s, "true") >= 3*pacedBatch })
	kill(t, follower)
	t.Logf("new leader killed with %d of 10 Nodes tainted", gpuTainted(ctx, s, "true"))
	startBinary(t, kc, leaseFlags...)
	waitFor(t, "the restarted controller completes the rollout", time.Minute, func() bool { return gpuTainted(ctx, s, "true") == pacedNodes })
	waitInSync(t, ctx, f, s, 30*time.Second)

	checkBatches(t, pacedWrites(t, ctx, s, skip, "true"), pacedBatch, pacedInterval)
	others.assertKept(t, ctx)
}

func metricLine(metrics, name string) string {
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, name+"{") {
			return l
		}
	}
	return "(none)"
}
