package int_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// hubPatches counts the hub credential's PATCHes in a spoke's audit log
// from entry offset on: all of them, those the spoke failed with a 5xx, and
// those per object ("nodes/name").
func hubPatches(t *testing.T, s *localfleet.Spoke, offset int) (all, failed int, byObject map[string]int) {
	t.Helper()
	byObject = map[string]int{}
	for _, e := range readAudit(t, s.AuditLogPath)[offset:] {
		if e.Verb != "patch" || e.User.Username != localfleet.CredentialUser {
			continue
		}
		all++
		if e.ResponseStatus.Code >= 500 {
			failed++
		}
		byObject[e.ObjectRef.Resource+"/"+e.ObjectRef.Name]++
	}
	return all, failed, byObject
}

// Half of the controller's patches fail (a webhook that errors every other
// call, so the API server answers 500) for 30 s. The controller retries with
// backoff, without waiting for the resync (an hour here), and every object
// ends up written once more than its failed attempts.
func TestTransientWriteFailuresAreRetried(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	const replicas = 5
	addInfraPool(t, ctx, s, replicas)
	startInSync(t, ctx, f, testOptions(), s)

	var n atomic.Int64
	hook, err := s.StartWebhook(ctx, func(localfleet.AdmissionCall) localfleet.Verdict {
		return localfleet.Verdict{Fail: n.Add(1)%2 == 1}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hook.Close(context.WithoutCancel(ctx)) }() // closed even if the test's deadline has passed
	offset := auditLines(t, s)

	const fault = 30 * time.Second
	start := time.Now()
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/flaky"] = "1" }); err != nil {
		t.Fatal(err)
	}
	converged := waitFor(t, "converged while half the patches fail", fault, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel("example.com/flaky", "1"))
	})
	// Whatever is left when the fault clears goes through at once.
	time.Sleep(time.Until(start.Add(fault)))
	hook.SetDecide(func(localfleet.AdmissionCall) localfleet.Verdict { return localfleet.Verdict{} })
	clearedAt := time.Now()
	waitFor(t, "in sync after the fault clears", 10*time.Second, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel("example.com/flaky", "1")) && machinesHoldLabel(ctx, s, "example.com/flaky", "1")
	})
	t.Logf("in sync %s after the fault cleared (converged %s after the change, during the fault)", time.Since(clearedAt).Round(time.Millisecond), converged.Round(time.Millisecond))
	waitInSync(t, ctx, f, s, 10*time.Second)

	all, failed, _ := hubPatches(t, s, offset)
	drifted := 2 * replicas // each Machine and its Node
	t.Logf("patches: %d for %d drifted objects, %d of them failed by the webhook (%d webhook calls)", all, drifted, failed, hook.Calls())
	if failed == 0 {
		t.Fatalf("no patch failed: the fault was not injected")
	}
	if ok := all - failed; float64(ok) > 1.1*float64(drifted) {
		t.Errorf("%d successful patches for %d drifted objects, want at most 1.1 per object plus the failed ones", ok, drifted)
	}
}

// A real validating webhook fails every write of one cluster (the API
// server answers 500) for a while, with a pool change pending. While the
// outage lasts the controller writes one object per probe interval, not
// every drifted object on a growing backoff; the status keeps saying the
// writes fail; and once the webhook answers again the pool converges within
// 5 s, however long the outage was. Two outages, 60 s and 20 s, as tests of
// their own, so that each waits beside the others rather than in turn.
func TestWriteOutage60s(t *testing.T) {
	t.Parallel()
	testWriteOutage(t, 60*time.Second)
}

func TestWriteOutage20s(t *testing.T) {
	t.Parallel()
	testWriteOutage(t, 20*time.Second)
}

func testWriteOutage(t *testing.T, outage time.Duration) {
	ctx := testContext(t, outage+4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	const replicas = 5
	addInfraPool(t, ctx, s, replicas)
	opts := testOptions()
	r := startInSync(t, ctx, f, opts, s)
	interval := r.Opts.OutageProbeInterval

	var failing atomic.Bool
	failing.Store(true)
	hook, err := s.StartWebhook(ctx, func(localfleet.AdmissionCall) localfleet.Verdict {
		return localfleet.Verdict{Fail: failing.Load()}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hook.Close(context.WithoutCancel(ctx)) }() // closed even if the test's deadline has passed
	offset := auditLines(t, s)

	start := time.Now()
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/outage"] = "1" }); err != nil {
		t.Fatal(err)
	}
	hub := f.Hub.Client
	waitFor(t, "the pool says its writes fail", 15*time.Second, func() bool {
		st, err := poolSync(ctx, hub, s, "infra")
		return err == nil && st.Status.Phase == v1alpha1.PhaseDrifted && st.Status.Reason == v1alpha1.ReasonWriteFailed &&
			strings.Contains(st.Status.Message, "every write to the spoke fails")
	})
	if g := testutil.ToFloat64(r.Metrics.WriteOutages); g < 1 {
		t.Errorf("clusters_in_write_outage = %v during the outage, want at least 1", g)
	}
	time.Sleep(time.Until(start.Add(outage)))
	st, err := poolSync(ctx, hub, s, "infra")
	if err != nil || st.Status.Reason != v1alpha1.ReasonWriteFailed {
		t.Errorf("at the end of the outage the pool says %v (%v), want WriteFailed", st.Status, err)
	}

	failing.Store(false)
	clearedAt := time.Now()
	took := waitFor(t, "", 5*time.Second, func() bool {
		st, err := poolSync(ctx, hub, s, "infra")
		return err == nil && st.Status.Phase == v1alpha1.PhaseInSync &&
			nodesHold(ctx, s, "infra", hasLabel("example.com/outage", "1")) && machinesHoldLabel(ctx, s, "example.com/outage", "1")
	})

	// Every patch sent before the webhook answered again failed; count those
	// by when the spoke received them. One received in the second before the
	// webhook was switched can have been admitted after it, and succeeded: the
	// check that the fault was injected leaves it out.
	var during, after, early, earlyFailed int
	var times []time.Time
	for _, e := range readAudit(t, s.AuditLogPath)[offset:] {
		if e.Verb != "patch" {
			continue
		}
		if e.RequestReceived.Before(clearedAt) {
			during++
			times = append(times, e.RequestReceived)
		} else {
			after++
		}
		if e.RequestReceived.Before(clearedAt.Add(-time.Second)) {
			early++
			if e.ResponseStatus.Code >= 500 {
				earlyFailed++
			}
		}
	}
	// The first sync tries every drifted Machine (their Nodes wait for them);
	// then one probe per interval, a little more than the interval apart.
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	probes := 0
	for i := replicas; i < len(times); i++ {
		if times[i].Sub(times[i-1]) < interval*9/10 {
			t.Errorf("patches %d and %d of the outage %s apart, want at least the probe interval %s", i, i+1, times[i].Sub(times[i-1]).Round(time.Millisecond), interval)
		}
		probes++
	}
	t.Logf("%s outage, probe interval %s: %d patches during it (%d at the first sync, %d probes; %d of the %d sent a second or more before it ended failed), %d after; InSync %.1f s after the fault cleared",
		outage, interval, during, min(during, replicas), probes, earlyFailed, early, after, took.Seconds())
	if limit := replicas + int(outage/interval) + 3; during > limit {
		t.Errorf("%d patches during a %s outage, want at most %d: the drifted Machines once, then one per %s", during, outage, limit, interval)
	}
	if early == 0 || earlyFailed < early {
		t.Errorf("%d of the %d patches sent a second or more before the outage ended failed: the fault was not injected", earlyFailed, early)
	}
	if took > 5*time.Second {
		t.Errorf("InSync %s after the fault cleared, want within 5 s", took.Round(time.Millisecond))
	}
	if ok := after; ok > 2*replicas {
		t.Errorf("%d patches after the fault cleared for %d drifted objects", ok, 2*replicas)
	}
}

func machinesHoldLabel(ctx context.Context, s *localfleet.Spoke, k, v string) bool {
	ms, err := s.Machines(ctx, "infra")
	if err != nil || len(ms) == 0 {
		return false
	}
	for _, m := range ms {
		if m.Spec.ObjectMeta.Labels[k] != v {
			return false
		}
	}
	return true
}

// A real admission webhook denies every patch of one Node. That Node is
// reported (status, Event, metric) and retried only every --denied-retry;
// the pool's other objects converge; once the webhook relents, the Node
// converges on the next slow retry.
func TestAdmissionDenialIsReportedAndRetriedSlowly(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 3)
	opts := testOptions()
	opts.DeniedRetry = 5 * time.Second
	r := startInSync(t, ctx, f, opts, s)
	nodes, err := s.Nodes(ctx, "infra")
	if err != nil || len(nodes) != 3 {
		t.Fatalf("nodes: %v %d", err, len(nodes))
	}
	denied := nodes[0].Name
	const policy = "labels on this Node are frozen by policy"
	hook, err := s.StartWebhook(ctx, func(c localfleet.AdmissionCall) localfleet.Verdict {
		return localfleet.Verdict{Deny: c.Resource == "nodes" && c.Name == denied, Message: policy}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hook.Close(context.WithoutCancel(ctx)) }() // closed even if the test's deadline has passed
	offset := auditLines(t, s)

	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/policy"] = "1" }); err != nil {
		t.Fatal(err)
	}
	others := func() bool {
		ns, err := s.Nodes(ctx, "infra")
		if err != nil {
			return false
		}
		for _, n := range ns {
			if n.Name != denied && n.Labels["example.com/policy"] != "1" {
				return false
			}
		}
		return true
	}
	waitFor(t, "the other Nodes converge", 10*time.Second, others)
	hub := f.Hub.Client
	waitFor(t, "the denial reported on the pool", 10*time.Second, func() bool {
		st, err := poolSync(ctx, hub, s, "infra")
		return err == nil && st.Status.Reason == v1alpha1.ReasonWriteDenied &&
			strings.Contains(st.Status.Message, denied) && strings.Contains(st.Status.Message, policy)
	})
	st, _ := poolSync(ctx, hub, s, "infra")
	t.Logf("status: %s %s %d/%d: %s", st.Status.Phase, st.Status.Reason, st.Status.Synced, st.Status.Total, st.Status.Message)
	if got := testutil.ToFloat64(r.Metrics.Denied.WithLabelValues(s.Key().String(), s.Name+"-infra")); got != 1 {
		t.Errorf("denied_objects = %v, want 1", got)
	}
	evs := &eventsv1.EventList{}
	if err := hub.List(ctx, evs, client.InNamespace(s.Name)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		if e.Reason == fleet.EventDenied && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, denied) && strings.Contains(e.Note, policy) {
			found = true
		}
	}
	if !found {
		t.Errorf("no %s Event naming %s and the webhook's message", fleet.EventDenied, denied)
	}

	// Slow cadence: about one attempt per DeniedRetry, never a loop, while
	// other changes keep the cluster busy.
	const window = 12 * time.Second
	_, _, before := hubPatches(t, s, offset)
	for i := range 6 {
		if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/busy"] = string(rune('a' + i)) }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(window / 6)
	}
	_, _, after := hubPatches(t, s, offset)
	attempts := after["nodes/"+denied] - before["nodes/"+denied]
	t.Logf("patches of the denied Node in %s with 6 pool changes: %d (each new spec is tried once, then held %s)", window, attempts, opts.DeniedRetry)
	if attempts > 6+int(window/opts.DeniedRetry)+1 {
		t.Errorf("%d patches of the denied Node in %s: a hot loop", attempts, window)
	}
	attemptsAt := time.Now()
	idle := after["nodes/"+denied]
	time.Sleep(3 * opts.DeniedRetry)
	_, _, later := hubPatches(t, s, offset)
	if n := later["nodes/"+denied] - idle; n > 4 {
		t.Errorf("%d patches of the denied Node in %s with no change, want about one per %s", n, time.Since(attemptsAt).Round(time.Second), opts.DeniedRetry)
	}

	hook.SetDecide(func(localfleet.AdmissionCall) localfleet.Verdict { return localfleet.Verdict{} })
	waitFor(t, "the denied Node converges on the next slow retry", opts.DeniedRetry+10*time.Second, func() bool {
		ns, err := s.Nodes(ctx, "infra")
		if err != nil {
			return false
		}
		for _, n := range ns {
			if n.Labels["example.com/policy"] != "1" || n.Labels["example.com/busy"] != "f" {
				return false
			}
		}
		return true
	})
	waitInSync(t, ctx, f, s, 10*time.Second)
	if got := testutil.ToFloat64(r.Metrics.Denied.WithLabelValues(s.Key().String(), s.Name+"-infra")); got != 0 {
		t.Errorf("denied_objects = %v after the webhook relented, want 0", got)
	}
}

// The hub fails every MachinePoolSync status write (a validating webhook it
// cannot call, so it answers 500) while a pool change is delivered. The spoke
// is written at once; the status, retried every probe interval (2 s) at
// most, says the change within seconds of the webhook's removal, however long
// it failed, and dates the change to the writes. Nothing else brings the
// cluster back: its resync is an hour away, and its spoke is in sync.
func TestFailedStatusWritesAreRetried(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 2)
	r := startInSync(t, ctx, f, testOptions(), s)
	hub := f.Hub.Client

	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	closed := "https://127.0.0.1:1/validate" // nothing listens: the call fails
	hook := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "fail-status-" + s.Name + ".localfleet.test"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "fail-status.localfleet.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &closed},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			Rules:                   []admissionregistrationv1.RuleWithOperations{statusWrites},
			// The cluster's namespace: the hub is shared with other tests.
			NamespaceSelector: clusterNamespace(s),
		}},
	}
	if err := hub.Create(ctx, hook); err != nil {
		t.Fatal(err)
	}
	c := changeWhileStatusFails(t, ctx, hub, s, "example.com/status-outage")
	time.Sleep(15 * time.Second) // longer than the retries' backoff takes to reach its cap
	c.statusUnmoved(t, ctx, hub, s)
	failures := testutil.ToFloat64(r.Metrics.StatusWriteFailures.WithLabelValues("transient"))
	if failures < 3 {
		t.Errorf("status_write_failures_total{reason=transient} = %v after 15 s, want retries", failures)
	}
	if failures > 20 {
		t.Errorf("status_write_failures_total{reason=transient} = %v after 15 s, want a backoff (0.5 s doubling to 2 s)", failures)
	}

	if err := hub.Delete(ctx, hook); err != nil {
		t.Fatal(err)
	}
	took := c.statusSaysChange(t, ctx, hub, s, 5*time.Second)
	t.Logf("status written %s after the webhook went (%v failed tries before)", took.Round(time.Millisecond), failures)
}

// The hub refuses every MachinePoolSync status write (a
// ValidatingAdmissionPolicy denies it) while a pool change is delivered. The
// spoke is written once; the refusal is counted and retried on the cluster's
// backoff, never in a loop and with no second spoke write; once the policy
// goes, the next retry writes the status, dating the change to the spoke's
// writes. The backoff's cap is 4 s here (5 minutes as shipped) so that the
// test sees it reached.
func TestRefusedStatusWritesBackOff(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	const replicas = 2
	addInfraPool(t, ctx, s, replicas)
	opts := testOptions()
	opts.RetryCap = 4 * time.Second
	r := startInSync(t, ctx, f, opts, s)
	hub := f.Hub.Client

	const frozen = "MachinePoolSync statuses are frozen by policy"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "freeze-status-" + s.Name + ".localfleet.test"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: statusWrites}},
				// The cluster's namespace: the hub is shared with other tests.
				NamespaceSelector: clusterNamespace(s),
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: frozen}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := hub.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The API server loads policies in the background: wait until a dry run
	// of a status write is refused.
	waitFor(t, "the policy in force", 30*time.Second, func() bool {
		cur, err := poolSync(ctx, hub, s, "infra")
		if err == nil {
			err = hub.Status().Update(ctx, cur, client.DryRunAll)
		}
		return err != nil && strings.Contains(err.Error(), frozen)
	})
	offset := auditLines(t, s)
	refused := func() float64 { return testutil.ToFloat64(r.Metrics.StatusWriteFailures.WithLabelValues("refused")) }
	c := changeWhileStatusFails(t, ctx, hub, s, "example.com/status-refused")
	time.Sleep(4 * time.Second) // the spoke's events of our writes have been handled
	settled := refused()
	const window = 16 * time.Second
	time.Sleep(window)
	c.statusUnmoved(t, ctx, hub, s)
	retries := refused() - settled
	t.Logf("refused status writes: %v while the spoke was written, %v in the %s after", settled, retries, window)
	if settled < 1 {
		t.Errorf("status_write_failures_total{reason=refused} = %v once the spoke was written, want the refusal counted", settled)
	}
	if least := float64(window/opts.RetryCap) - 1; retries < least {
		t.Errorf("%v refused retries in %s, want at least %v: the backoff at its cap, %s", retries, window, least, opts.RetryCap)
	}
	if most := float64(window/opts.RetryCap) + 2; retries > most {
		t.Errorf("%v refused retries in %s, want at most %v: one per backoff step, capped at %s, not a loop", retries, window, most, opts.RetryCap)
	}

	for _, o := range []client.Object{binding, policy} {
		if err := hub.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	took := c.statusSaysChange(t, ctx, hub, s, opts.RetryCap+10*time.Second)
	if all, _, byObject := hubPatches(t, s, offset); all != 2*replicas {
		t.Errorf("%d spoke patches for %d drifted objects, want one each: a refused status is retried without writing the spoke again (%v)", all, 2*replicas, byObject)
	}
	t.Logf("status written %s after the policy went", took.Round(time.Millisecond))
}

// clusterNamespace selects the namespace of s's cluster on the hub.
func clusterNamespace(s *localfleet.Spoke) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: s.Name}}
}

// statusWrites matches the MachinePoolSync status writes, for a hub's
// admission webhook or policy to fail or refuse.
var statusWrites = admissionregistrationv1.RuleWithOperations{
	Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
	Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
		Resources: []string{"machinepoolsyncs/status"}},
}

// statusChange is a pool change made while the hub fails or refuses the
// pool's MachinePoolSync status writes.
type statusChange struct {
	before         *v1alpha1.MachinePoolSync // the status before it
	pool           *hivev1.MachinePool
	began, written time.Time // when it was made; when the spoke held it
}

// changeWhileStatusFails sets the infra pool's label k to "1" and waits for
// the spoke to hold it.
func changeWhileStatusFails(t *testing.T, ctx context.Context, hub client.Client, s *localfleet.Spoke, k string) statusChange {
	t.Helper()
	before, err := poolSync(ctx, hub, s, "infra")
	if err != nil {
		t.Fatal(err)
	}
	c := statusChange{before: before, began: time.Now()}
	if c.pool, err = s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels[k] = "1" }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the spoke written while the hub fails status writes", 30*time.Second, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel(k, "1")) && machinesHoldLabel(ctx, s, k, "1")
	})
	c.written = time.Now()
	return c
}

// statusUnmoved stops the test if the status moved on from before the
// change: the fault was not injected.
func (c statusChange) statusUnmoved(t *testing.T, ctx context.Context, hub client.Client, s *localfleet.Spoke) {
	t.Helper()
	if st, err := poolSync(ctx, hub, s, "infra"); err != nil || st.Status.ObservedGeneration != c.before.Status.ObservedGeneration {
		t.Fatalf("the status moved to generation %d (%v) while the hub failed its writes: the fault was not injected", st.Status.ObservedGeneration, err)
	}
}

// statusSaysChange waits up to within for the status to say the change, and
// checks that it says it as the failed writes would have: dated to the
// spoke's writes (lastChangeTime keeps seconds) and with the objects they
// patched, not the retry's own time and count. It returns how long it took.
func (c statusChange) statusSaysChange(t *testing.T, ctx context.Context, hub client.Client, s *localfleet.Spoke, within time.Duration) time.Duration {
	t.Helper()
	took := waitFor(t, "the status says the change once the hub takes it", within, func() bool {
		st, err := poolSync(ctx, hub, s, "infra")
		return err == nil && st.Status.ObservedGeneration == c.pool.Generation && st.Status.Phase == v1alpha1.PhaseInSync
	})
	st, err := poolSync(ctx, hub, s, "infra")
	if err != nil {
		t.Fatal(err)
	}
	if at := st.Status.LastChangeTime; at == nil || at.Time.Before(c.began.Truncate(time.Second)) || at.Time.After(c.written) {
		t.Errorf("lastChangeTime %v, want the time of the spoke's writes (from %v to %v)", at, c.began.UTC(), c.written.UTC())
	}
	if st.Status.Patched == 0 {
		t.Errorf("patched 0, want the objects the change's sync patched, not the retry's own count")
	}
	return took
}
