package fleet

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/pkg/remote"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// TestOutageTracker table-tests the outage's bookkeeping: what each sync's
// writes do to it, and when the next probe is due.
func TestOutageTracker(t *testing.T) {
	const interval = 2 * time.Second
	type step struct {
		advance time.Duration // before the step
		round   writeRound
		want    outageChange
		// After the step: a probe due now, and the wait next() would return
		// (0: not in an outage).
		due  bool
		wait time.Duration
	}
	allFail := writeRound{Transient: 6, Cause: "Machine m0: 500"}
	probeFails := func(key string) writeRound { return writeRound{Transient: 1, Held: 5, Probe: key} }
	tests := map[string][]step{
		"in sync: never an outage": {
			{round: writeRound{}, want: outageNone},
			{round: writeRound{Patched: 3}, want: outageNone},
		},
		"some writes through: a partial failure, not an outage": {
			{round: writeRound{Patched: 5, Transient: 1}, want: outageNone},
		},
		"only denials: not an outage": {
			{round: writeRound{}, want: outageNone},
		},
		"every write fails: an outage, probed every interval until a probe goes through": {
			{round: allFail, want: outageEntered, wait: interval},
			{advance: interval / 2, round: writeRound{Held: 6}, want: outageGoesOn, wait: interval / 2},
			{advance: interval / 2, round: probeFails("ns/m0"), want: outageGoesOn, wait: interval},
			{advance: interval, round: probeFails("ns/m1"), want: outageGoesOn, wait: interval},
			{advance: interval, round: writeRound{Patched: 6, Probe: "ns/m2"}, want: outageLeft},
			{round: writeRound{}, want: outageNone},
		},
		"a probe that is due is due whatever the outage's length": {
			{round: allFail, want: outageEntered, wait: interval},
			{advance: time.Hour, round: writeRound{}, want: outageLeft},
		},
		"a long sync: the next probe is due at once, but still requeued": {
			{round: allFail, want: outageEntered, wait: interval},
			{advance: 3 * interval, round: writeRound{Held: 6}, want: outageGoesOn, due: true, wait: 10 * time.Millisecond},
		},
		"the drift went away during the outage: over": {
			{round: allFail, want: outageEntered, wait: interval},
			{advance: interval, round: writeRound{}, want: outageLeft},
		},
		"what is left was denied: over": {
			{round: allFail, want: outageEntered, wait: interval},
			{advance: interval, round: writeRound{Probe: "ns/m0"}, want: outageLeft},
		},
		"the probe went through but the rest failed: over, a partial failure": {
			{round: allFail, want: outageEntered, wait: interval},
			{advance: interval, round: writeRound{Patched: 1, Transient: 5, Probe: "ns/m0"}, want: outageLeft},
		},
	}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			o := newOutageTracker(interval, func() time.Time { return now })
			for i, s := range steps {
				now = now.Add(s.advance)
				got, _ := o.record("c", s.round)
				if got != s.want {
					t.Errorf("step %d: change %v, want %v", i, got, s.want)
				}
				if turn := o.turn("c"); turn.Due != s.due || turn.Active != (s.wait > 0) {
					t.Errorf("step %d: turn %+v, want due %v, active %v", i, turn, s.due, s.wait > 0)
				}
				wait, ok := o.wait("c")
				if wait != s.wait || ok != (s.wait > 0) {
					t.Errorf("step %d: wait %s %v, want %s", i, wait, ok, s.wait)
				}
			}
		})
	}
}

func TestOutageTrackerRemembersTheProbeAndCause(t *testing.T) {
	now := time.Unix(1000, 0)
	o := newOutageTracker(time.Second, func() time.Time { return now })
	o.record("c", writeRound{Transient: 2, Cause: "first"})
	now = now.Add(time.Second)
	if turn := o.turn("c"); !turn.Due || turn.After != "" {
		t.Fatalf("turn %+v, want a probe due from the first target", turn)
	}
	_, got := o.record("c", writeRound{Transient: 1, Held: 1, Probe: "ns/m1", Cause: "second"})
	if got.probed != "ns/m1" || got.probes != 1 || got.cause != "first" || !got.since.Equal(time.Unix(1000, 0)) {
		t.Errorf("outage %+v: want probed ns/m1, 1 probe, the first cause, since the start", got)
	}
	if turn := o.turn("c"); turn.Due || turn.After != "ns/m1" {
		t.Errorf("turn %+v, want no probe due, after ns/m1", turn)
	}
	if !o.drop("c") || o.drop("c") {
		t.Error("drop reports the outage once")
	}
	if turn := o.turn("c"); turn.Active {
		t.Error("a forgotten cluster is still in an outage")
	}
}

func TestOutageTrackerOff(t *testing.T) {
	o := newOutageTracker(-1, time.Now)
	if got, _ := o.record("c", writeRound{Transient: 3}); got != outageNone {
		t.Errorf("probes off: change %v, want none", got)
	}
}

func TestProbeOrderRotates(t *testing.T) {
	target := func(name string, held bool) targetWork {
		return targetWork{held: held, target: nmsync.Target{Machine: &machinev1beta1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}}}
	}
	work := []*poolWork{
		{targets: []targetWork{target("b", false), target("d", false)}},
		nil,
		{targets: []targetWork{target("c", true), target("a", false)}},
	}
	keys := func(refs []targetRef) string {
		var out []string
		for _, r := range refs {
			out = append(out, fmt.Sprintf("%s@%d/%d", r.key, r.pool, r.target))
		}
		return strings.Join(out, " ")
	}
	for after, want := range map[string]string{
		"":     "ns/a@2/1 ns/b@0/0 ns/d@0/1",
		"ns/a": "ns/b@0/0 ns/d@0/1 ns/a@2/1",
		"ns/c": "ns/d@0/1 ns/a@2/1 ns/b@0/0", // the last probed may be gone
		"ns/d": "ns/a@2/1 ns/b@0/0 ns/d@0/1",
		"ns/z": "ns/a@2/1 ns/b@0/0 ns/d@0/1",
	} {
		if got := keys(probeOrder(work, after)); got != want {
			t.Errorf("after %q: %s, want %s", after, got, want)
		}
	}
}

func TestJudgeProbe(t *testing.T) {
	r := func(o nmsync.Outcome, reason string, requests int) nmsync.Result {
		return nmsync.Result{Outcome: o, Reason: reason, Requests: requests}
	}
	notSynced := r(nmsync.OutcomeSkipped, nmsync.ReasonMachineNotSynced, 0)
	for name, tc := range map[string]struct {
		results []nmsync.Result
		want    probeVerdict
	}{
		"in sync":                        {[]nmsync.Result{r(nmsync.OutcomeInSync, "", 0), r(nmsync.OutcomeInSync, "", 0)}, probeNotSent},
		"held after a denial":            {[]nmsync.Result{r(nmsync.OutcomeFailed, nmsync.ReasonDenied, 0), notSynced}, probeNotSent},
		"machine failed":                 {[]nmsync.Result{r(nmsync.OutcomeFailed, "", 1), notSynced}, probeFailed},
		"machine conflicted":             {[]nmsync.Result{r(nmsync.OutcomeConflict, "", 4), notSynced}, probeFailed},
		"machine in sync, node failed":   {[]nmsync.Result{r(nmsync.OutcomeInSync, "", 0), r(nmsync.OutcomeFailed, "", 1)}, probeFailed},
		"machine patched, node failed":   {[]nmsync.Result{r(nmsync.OutcomePatched, "", 1), r(nmsync.OutcomeFailed, "", 1)}, probeThrough},
		"machine denied":                 {[]nmsync.Result{r(nmsync.OutcomeFailed, nmsync.ReasonDenied, 1), notSynced}, probeAnswered},
		"machine gone":                   {[]nmsync.Result{r(nmsync.OutcomeSkipped, nmsync.ReasonNotFound, 1), r(nmsync.OutcomeSkipped, "", 0)}, probeAnswered},
		"machine in sync, node patched":  {[]nmsync.Result{r(nmsync.OutcomeInSync, "", 0), r(nmsync.OutcomePatched, "", 1)}, probeThrough},
		"machine in sync, node settling": {[]nmsync.Result{r(nmsync.OutcomeInSync, "", 0), r(nmsync.OutcomeSkipped, nmsync.ReasonSettling, 0)}, probeNotSent},
	} {
		if got := judgeProbe(tc.results); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestOutageProbeIntervalDefault(t *testing.T) {
	for name, tc := range map[string]struct {
		in   Options
		want time.Duration
	}{
		"default":                      {Options{}, DefaultOutageProbeInterval},
		"set":                          {Options{OutageProbeInterval: 7 * time.Second}, 7 * time.Second},
		"set below the retry base":     {Options{OutageProbeInterval: time.Second, RetryBase: 3 * time.Second}, time.Second},
		"off":                          {Options{OutageProbeInterval: -1}, -1},
		"a retry base above 2s":        {Options{RetryBase: 5 * time.Second}, 5 * time.Second},
		"a retry cap below 2s":         {Options{RetryBase: 100 * time.Millisecond, RetryCap: time.Second}, time.Second},
		"a retry base and cap below 2": {Options{RetryBase: 100 * time.Millisecond, RetryCap: 200 * time.Millisecond}, 200 * time.Millisecond},
	} {
		if got := tc.in.WithDefaults().OutageProbeInterval; got != tc.want {
			t.Errorf("%s: %s, want %s", name, got, tc.want)
		}
	}
}

// outageWorld is a world of 3 Machines and Nodes whose pool drifted, with
// the reconciler on a clock the test moves (Options.Clock).
func outageWorld(t *testing.T, opts Options) (*world, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	opts.Clock = clk
	return newWorld(t, 3, opts), clk
}

var errWebhookDown = apierrors.NewInternalError(errors.New(`failed calling webhook "v.example.com": connection refused`))

// A cluster whose every write fails: the first sync tries every object and
// says so (status, Event, log, gauge); then each sync writes one object, a
// probe, once per interval, and says nothing new; probes rotate; the probe
// that goes through writes the rest in the same sync.
func TestReconcileWriteOutage(t *testing.T) {
	const interval = 2 * time.Second
	w, clk := outageWorld(t, Options{OutageProbeInterval: interval})
	w.spoke.failPatch = func(client.Object) error { return errWebhookDown }

	res, err := w.reconcile(t)
	got := w.outcome(t, res.RequeueAfter, err)
	want := outcome{Phase: v1alpha1.PhaseDrifted, Reason: v1alpha1.ReasonWriteFailed, Total: 6, Drifted: 6, SpokePatches: 3, StatusWrites: 2,
		Events: []string{EventSyncFailed}, Ensured: true, State: StateDrifting, RequeueSoonerThanResync: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("first sync (-want +got):\n%s", diff)
	}
	if err != nil || res.RequeueAfter != interval {
		t.Errorf("first sync: requeue after %s, err %v; want the probe interval %s, no error (not the backoff)", res.RequeueAfter, err, interval)
	}
	msg := w.poolSync(t).Status.Message
	if !strings.Contains(msg, "every write to the spoke fails") || !strings.Contains(msg, "connection refused") {
		t.Errorf("status message %q does not say the writes fail, and why", msg)
	}
	if g := testutil.ToFloat64(w.r.Metrics.WriteOutages); g != 1 {
		t.Errorf("clusters_in_write_outage = %v, want 1", g)
	}

	// A sync before the probe is due (a watch event) writes nothing.
	clk.Step(interval / 2)
	res, err = w.reconcile(t)
	got = w.outcome(t, res.RequeueAfter, err)
	if got.SpokePatches != 3 || got.StatusWrites != 0 || len(got.Events) != 0 || err != nil || res.RequeueAfter != interval/2 {
		t.Errorf("sync before the probe is due: patches %d (want 3), status writes %d, events %v, err %v, requeue %s (want %s)",
			got.SpokePatches, got.StatusWrites, got.Events, err, res.RequeueAfter, interval/2)
	}

	// Each due probe writes one Machine, the next one each time, and says nothing new.
	before := map[string]int{}
	for k, v := range w.spoke.patches {
		before[k] = v
	}
	for i := range 3 {
		clk.Step(interval)
		res, err = w.reconcile(t)
		got = w.outcome(t, res.RequeueAfter, err)
		wantProbe := fmt.Sprintf("Machine/c-workers-a-%d", i)
		if n := w.spoke.patches[wantProbe] - before[wantProbe]; n != 1 || got.SpokePatches != 4+i {
			t.Errorf("probe %d: %s patched %d times, %d patches in all; want 1 and %d", i, wantProbe, n, got.SpokePatches, 4+i)
		}
		if got.StatusWrites != 0 || len(got.Events) != 0 || err != nil || res.RequeueAfter != interval {
			t.Errorf("probe %d: status writes %d, events %v, err %v, requeue %s; want none, none, nil, %s", i, got.StatusWrites, got.Events, err, res.RequeueAfter, interval)
		}
		if got.Phase != v1alpha1.PhaseDrifted || got.Reason != v1alpha1.ReasonWriteFailed || got.Drifted != 6 {
			t.Errorf("probe %d: status %s %s drifted %d, want Drifted WriteFailed 6", i, got.Phase, got.Reason, got.Drifted)
		}
	}
	if p := testutil.ToFloat64(w.r.Metrics.OutageProbes); p != 3 {
		t.Errorf("write_outage_probes_total = %v, want 3", p)
	}

	// The fault clears: the next probe goes through, and the rest follow at once.
	w.spoke.failPatch = nil
	clk.Step(interval)
	res, err = w.reconcile(t)
	got = w.outcome(t, res.RequeueAfter, err)
	want = outcome{Phase: v1alpha1.PhaseInSync, Total: 6, Synced: 6, Patched: 6, SpokePatches: 6 + 6, StatusWrites: 1,
		Events: []string{EventApplied}, Ensured: true, State: StateInSync}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sync after the fault cleared (-want +got):\n%s", diff)
	}
	if g := testutil.ToFloat64(w.r.Metrics.WriteOutages); g != 0 {
		t.Errorf("clusters_in_write_outage = %v after the outage, want 0", g)
	}
	if _, ok := w.r.outages.wait(w.key().String()); ok {
		t.Error("still in an outage")
	}
}

// A Machine whose own writes keep failing does not starve the others: the
// probes rotate past it, and the first other probe ends the outage.
func TestReconcileWriteOutageProbesRotate(t *testing.T) {
	const interval = time.Second
	w, clk := outageWorld(t, Options{OutageProbeInterval: interval})
	outage := true
	w.spoke.failPatch = func(obj client.Object) error {
		if outage || obj.GetName() == "c-workers-a-0" {
			return errWebhookDown
		}
		return nil
	}
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	clk.Step(interval)
	if _, err := w.reconcile(t); err != nil { // probes c-workers-a-0
		t.Fatal(err)
	}
	outage = false
	clk.Step(interval)
	res, err := w.reconcile(t) // probes c-workers-a-1: through; then the rest
	got := w.outcome(t, res.RequeueAfter, err)
	if got.Synced != 4 || got.Drifted != 2 || got.Reason != v1alpha1.ReasonWriteFailed {
		t.Errorf("after the fault cleared but for one Machine: synced %d drifted %d reason %s; want 4, 2 (the failing Machine and its Node), WriteFailed",
			got.Synced, got.Drifted, got.Reason)
	}
	if _, ok := w.r.outages.wait(w.key().String()); ok {
		t.Error("still in an outage after a probe went through")
	}
	if res.RequeueAfter != w.r.Opts.RetryBase || err != nil {
		t.Errorf("requeue after %s, err %v; want RetryBase %s for a partial failure", res.RequeueAfter, err, w.r.Opts.RetryBase)
	}
	if n := w.spoke.patches["Machine/c-workers-a-2"]; n != 2 {
		t.Errorf("c-workers-a-2 patched %d times, want 2 (the first sync, then with the rest)", n)
	}
}

// Denials are not an outage: a denied object is held, the others carry on.
// A pool change during an outage waits for the probe, and is not written at
// once to every object.
func TestReconcileWriteOutageDenialsAndChanges(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "machines"}, "x", errors.New("denied"))
	w, _ := outageWorld(t, Options{OutageProbeInterval: time.Second})
	w.spoke.failPatch = func(client.Object) error { return forbidden }
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.r.outages.wait(w.key().String()); ok {
		t.Fatal("denials began an outage")
	}
	if g := testutil.ToFloat64(w.r.Metrics.WriteOutages); g != 0 {
		t.Errorf("clusters_in_write_outage = %v, want 0", g)
	}

	w2, clk2 := outageWorld(t, Options{OutageProbeInterval: time.Second})
	w2.spoke.failPatch = func(client.Object) error { return errWebhookDown }
	if _, err := w2.reconcile(t); err != nil {
		t.Fatal(err)
	}
	mp := &hivev1.MachinePool{}
	if err := w2.hub.Get(t.Context(), client.ObjectKey{Namespace: worldNS, Name: worldCD + "-" + worldPool}, mp); err != nil {
		t.Fatal(err)
	}
	mp.Spec.Labels[labelKey] = "b"
	if err := w2.hub.Update(t.Context(), mp); err != nil {
		t.Fatal(err)
	}
	patches := w2.spoke.patchCount()
	if _, err := w2.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if n := w2.spoke.patchCount() - patches; n != 0 {
		t.Errorf("a pool change before the probe was due: %d patches, want 0", n)
	}
	clk2.Step(time.Second)
	if _, err := w2.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if n := w2.spoke.patchCount() - patches; n != 1 {
		t.Errorf("the probe after a pool change: %d patches, want 1", n)
	}
}

// With probes off, a cluster whose writes all fail is retried with the
// backoff, as before.
func TestReconcileWriteOutageProbesOff(t *testing.T) {
	w, _ := outageWorld(t, Options{OutageProbeInterval: -1})
	w.spoke.failPatch = func(client.Object) error { return errWebhookDown }
	if _, err := w.reconcile(t); err == nil {
		t.Error("no error: want the backoff")
	}
	if _, ok := w.r.outages.wait(w.key().String()); ok {
		t.Error("in an outage with probes off")
	}
}

// A cluster forgotten in an outage leaves the gauge.
func TestWriteOutageForgotten(t *testing.T) {
	w, _ := outageWorld(t, Options{})
	w.spoke.failPatch = func(client.Object) error { return errWebhookDown }
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if g := testutil.ToFloat64(w.r.Metrics.WriteOutages); g != 1 {
		t.Fatalf("clusters_in_write_outage = %v, want 1", g)
	}
	if err := w.hub.Delete(t.Context(), w.cd); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if g := testutil.ToFloat64(w.r.Metrics.WriteOutages); g != 0 {
		t.Errorf("clusters_in_write_outage = %v after the cluster went, want 0", g)
	}
}

// The outage is logged when it begins and when it ends, with the cluster,
// and not on every failed probe.
func TestWriteOutageLogs(t *testing.T) {
	w, clk := outageWorld(t, Options{OutageProbeInterval: time.Second})
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	ctx := log.IntoContext(t.Context(), logger)
	sync := func() {
		t.Helper()
		if _, err := w.r.Reconcile(ctx, reconcile.Request{NamespacedName: w.key()}); err != nil {
			t.Fatal(err)
		}
	}
	w.spoke.failPatch = func(client.Object) error { return errWebhookDown }
	sync()
	for range 3 {
		clk.Step(time.Second)
		sync()
	}
	w.spoke.failPatch = nil
	clk.Step(time.Second)
	sync()
	var outage []string
	for _, l := range lines {
		if strings.Contains(l, `"msg"="write outage`) {
			outage = append(outage, l)
		}
	}
	if len(outage) != 2 || !strings.Contains(outage[0], `"msg"="write outage: every write`) || !strings.Contains(outage[1], `"msg"="write outage over"`) {
		t.Fatalf("outage log lines:\n%s\nwant one when it begins and one when it ends", strings.Join(outage, "\n"))
	}
	for _, l := range outage {
		if !strings.Contains(l, `"cluster"="ns/c"`) {
			t.Errorf("no cluster in %s", l)
		}
	}
	if !strings.Contains(outage[1], `"probes"=4`) {
		t.Errorf("the end of the outage does not count its 4 probes: %s", outage[1])
	}
}

// A cluster with a pool that is not synced (paused) beside the one written:
// its writes, its outage and its probes leave the other pool alone.
func TestReconcileWriteOutageWithAPausedPool(t *testing.T) {
	w, clk := outageWorld(t, Options{OutageProbeInterval: time.Second})
	paused := &hivev1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: worldNS, Name: worldCD + "-a-paused", Generation: 1,
			Annotations: map[string]string{nmsync.AnnotationPaused: "true"}},
		Spec: hivev1.MachinePoolSpec{ClusterDeploymentRef: corev1.LocalObjectReference{Name: worldCD}, Name: "a-paused"},
	}
	if err := w.hub.Create(t.Context(), paused); err != nil {
		t.Fatal(err)
	}
	w.spoke.failPatch = func(client.Object) error { return errWebhookDown }
	for i := range 3 {
		if _, err := w.reconcile(t); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
		clk.Step(time.Second)
	}
	w.spoke.failPatch = nil
	res, err := w.reconcile(t)
	if got := w.outcome(t, res.RequeueAfter, err); got.Phase != v1alpha1.PhaseInSync || got.Synced != 6 {
		t.Errorf("after the outage: %s, %d synced; want InSync, 6", got.Phase, got.Synced)
	}
}

// One clock: Options.Clock reaches the spoke connections unless Remote.Clock is set, and the
// real clock stands in for a nil one.
func TestOptionsClockReachesTheSpokeConnections(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	if got := (Options{Clock: clk}).WithDefaults().Remote.Clock; got != clk {
		t.Errorf("Remote.Clock %T, want Options.Clock", got)
	}
	own := clocktesting.NewFakeClock(time.Unix(2000, 0))
	if got := (Options{Clock: clk, Remote: remote.Options{Clock: own}}).WithDefaults().Remote.Clock; got != own {
		t.Errorf("Remote.Clock %T, want its own", got)
	}
	if o := (Options{}).WithDefaults(); o.Clock == nil || o.Remote.Clock == nil {
		t.Errorf("defaults: Clock %v, Remote.Clock %v, want the real clock", o.Clock, o.Remote.Clock)
	}
}
