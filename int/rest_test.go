package int_test

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// hubCounter counts the controller's hub requests by verb ("watch", or the
// HTTP method of anything else), and the GETs of one Secret apart.
type hubCounter struct {
	mu         sync.Mutex
	byVerb     map[string]int
	secretGets int
}

// countHub returns a copy of cfg whose requests c counts.
func countHub(cfg *rest.Config) (*rest.Config, *hubCounter) {
	c := &hubCounter{byVerb: map[string]int{}}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			verb := req.Method
			if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
				verb = "watch"
			}
			c.mu.Lock()
			c.byVerb[verb]++
			if verb == http.MethodGet && strings.Contains(req.URL.Path, "/secrets/") {
				c.secretGets++
			}
			c.mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	return cfg, c
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *hubCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byVerb)
}

// since returns the requests counted after before, and how many were not watches.
func (c *hubCounter) since(before map[string]int) (map[string]int, int) {
	out, nonWatch := map[string]int{}, 0
	for v, n := range c.snapshot() {
		if d := n - before[v]; d > 0 {
			out[v] = d
			if v != "watch" {
				nonWatch += d
			}
		}
	}
	return out, nonWatch
}

// spokeVerbsSince counts a spoke's audit entries from entry offset on, by verb.
func spokeVerbsSince(t *testing.T, s *localfleet.Spoke, offset int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range readAudit(t, s.AuditLogPath)[offset:] {
		out[e.Verb]++
	}
	return out
}

// A fleet in sync costs only watches: resyncs come and go (every 2 s here),
// and neither a spoke nor the hub sees a request other than a watch.
func TestFleetAtRestSendsOnlyWatches(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 2)
	for _, s := range f.Spokes() {
		addInfraPool(t, ctx, s, 2)
	}
	opts := testOptions()
	opts.ResyncPeriod = 2 * time.Second
	cfg, hub := countHub(controllerConfig(t, ctx, f))
	startController(t, ctx, cfg, opts)
	for _, s := range f.Spokes() {
		waitInSync(t, ctx, f, s, time.Minute)
	}
	time.Sleep(3 * time.Second) // let the first syncs' writes and Events land

	before := hub.snapshot()
	offsets := map[string]int{}
	for _, s := range f.Spokes() {
		offsets[s.Name] = auditLines(t, s)
	}
	const window = 20 * time.Second
	time.Sleep(window)

	for _, s := range f.Spokes() {
		verbs := spokeVerbsSince(t, s, offsets[s.Name])
		t.Logf("%s at rest for %s (about %d resyncs): %v", s.Name, window, int(window/opts.ResyncPeriod), verbs)
		for v := range verbs {
			if v != "watch" {
				t.Errorf("%s got %v while the fleet was in sync, want only watches", s.Name, verbs)
				break
			}
		}
	}
	got, nonWatch := hub.since(before)
	t.Logf("hub at rest for %s: %v", window, got)
	if nonWatch != 0 {
		t.Errorf("hub got %d requests other than watches while the fleet was in sync: %v", nonWatch, got)
	}
}

// A restarted controller finds every status already right: it reads each
// cluster's kubeconfig Secret once and writes nothing to the hub.
func TestRestartRewritesNothing(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 3)
	for _, s := range f.Spokes() {
		addInfraPool(t, ctx, s, 2)
	}
	base := controllerConfig(t, ctx, f)
	firstCtx, stopFirst := context.WithCancel(ctx)
	startController(t, firstCtx, base, testOptions())
	for _, s := range f.Spokes() {
		waitInSync(t, ctx, f, s, time.Minute)
	}
	time.Sleep(2 * time.Second)
	stopFirst()
	statusRV := func() map[string]string {
		out := map[string]string{}
		for _, sp := range f.Spokes() {
			list := &v1alpha1.MachinePoolSyncList{}
			if err := f.Hub.Client.List(ctx, list, client.InNamespace(sp.Name)); err != nil {
				t.Fatal(err)
			}
			for _, s := range list.Items {
				out[s.Namespace+"/"+s.Name] = s.ResourceVersion
			}
		}
		return out
	}
	rvBefore := statusRV()
	time.Sleep(2 * time.Second) // the first manager is gone

	cfg, hub := countHub(base)
	start := time.Now()
	r := startController(t, ctx, cfg, testOptions())
	for _, s := range f.Spokes() {
		waitFor(t, s.Name+" connected after restart", time.Minute, func() bool { return r.Spokes.Status(s.Key()).Connected })
	}
	t.Logf("all %d spokes connected %s after start", len(f.Spokes()), time.Since(start).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // the connect notifications' reconciles

	got := hub.snapshot()
	nonWatch := 0
	for v, n := range got {
		if v != "watch" {
			nonWatch += n
		}
	}
	clusters := len(f.Spokes())
	t.Logf("hub requests from start: %v (%d not watches, %.2f per cluster; discovery included)", got, nonWatch, float64(nonWatch)/float64(clusters))
	if writes := got[http.MethodPost] + got[http.MethodPut] + got[http.MethodPatch] + got[http.MethodDelete]; writes != 0 {
		t.Errorf("a restart with every status right wrote %d times to the hub: %v", writes, got)
	}
	// Per cluster: one read of its kubeconfig Secret. The other reads are the
	// process's own start (API discovery, one list per informer), the same for
	// 3 clusters or 3,000.
	hub.mu.Lock()
	secretGets := hub.secretGets
	hub.mu.Unlock()
	t.Logf("kubeconfig Secret reads: %d for %d clusters", secretGets, clusters)
	if secretGets > clusters {
		t.Errorf("%d kubeconfig Secret reads for %d clusters, want at most one each", secretGets, clusters)
	}
	if rvAfter := statusRV(); !maps.Equal(rvBefore, rvAfter) {
		t.Errorf("MachinePoolSyncs rewritten by a restart: before %v, after %v", rvBefore, rvAfter)
	}
}

// A kubeconfig Secret that disappears is reported at once, and one that
// comes back (restored, or fixed after being invalid) reconnects its cluster
// at once, with the pool change made meanwhile delivered: no resync needed.
func TestKubeconfigSecretDeletedRestoredAndFixed(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 2)
	opts := testOptions() // resync in an hour: only watches can explain a reaction
	startInSync(t, ctx, f, opts, s)
	hub := f.Hub.Client
	key := types.NamespacedName{Namespace: s.Name, Name: s.SecretName()}
	saved := &corev1.Secret{}
	if err := hub.Get(ctx, key, saved); err != nil {
		t.Fatal(err)
	}
	reasonIs := func(want string) func() bool {
		return func() bool { _, r := poolReason(ctx, hub, s); return r == want }
	}
	const limit = 15 * time.Second // the goal is 5 s (docs/benchmarks.md); asserted generously

	if err := hub.Delete(ctx, saved.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deleted Secret reported SecretMissing", limit, reasonIs("SecretMissing"))
	if _, err := s.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/while"] = "missing" }); err != nil {
		t.Fatal(err)
	}
	restored := &corev1.Secret{ObjectMeta: *saved.ObjectMeta.DeepCopy(), Data: saved.Data, Type: saved.Type}
	restored.ResourceVersion, restored.UID, restored.CreationTimestamp = "", "", metav1.Time{}
	if err := hub.Create(ctx, restored); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "restored Secret: the change made meanwhile delivered", limit, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel("example.com/while", "missing"))
	})
	waitInSync(t, ctx, f, s, limit)

	if err := s.SetSecretData(ctx, map[string][]byte{"kubeconfig": []byte("not: [a kubeconfig")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "broken Secret reported SecretInvalid", limit, reasonIs("SecretInvalid"))
	if _, err := s.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/while"] = "invalid" }); err != nil {
		t.Fatal(err)
	}
	fixed := &corev1.Secret{}
	if err := hub.Get(ctx, key, fixed); err != nil {
		t.Fatal(err)
	}
	fixed.Data = saved.Data
	if err := hub.Update(ctx, fixed); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fixed Secret: the change made meanwhile delivered", limit, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel("example.com/while", "invalid"))
	})
	waitInSync(t, ctx, f, s, limit)
}

// A spoke that dies, is black-holed or freezes is reported Unreachable
// within a minute, with the shipped health settings (no periodic probe: the
// transport's HTTP/2 health check and the watches notice), and reconnects
// once it is back.
func TestDeadSpokeDetectedWithoutPolling(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 6*time.Minute)
	f := startFleet(t, ctx, 4)
	for _, s := range f.Spokes() {
		addInfraPool(t, ctx, s, 1)
	}
	healthy, holed, killed, frozen := f.Spokes()[0], f.Spokes()[1], f.Spokes()[2], f.Spokes()[3]
	proxy, err := holed.UseProxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.Remote = fleet.Options{}.WithDefaults().Remote // shipped health settings
	opts.Remote.BackoffBase, opts.Remote.BackoffCap = 200*time.Millisecond, 2*time.Second
	startInSync(t, ctx, f, opts, f.Spokes()...)
	versionProbes := func() int {
		n := 0
		for _, s := range f.Spokes() {
			for _, e := range readAudit(t, s.AuditLogPath) {
				if e.RequestURI == "/version" {
					n++
				}
			}
		}
		return n
	}
	probesBefore := versionProbes()

	faults := map[string]func() error{
		holed.Name:  func() error { proxy.BlackHole(true); return nil },
		killed.Name: killed.KillAPIServer,
		frozen.Name: frozen.FreezeAPIServer,
	}
	heal := map[string]func() error{
		holed.Name:  func() error { proxy.BlackHole(false); return nil },
		killed.Name: killed.StartAPIServer,
		frozen.Name: frozen.ThawAPIServer,
	}
	t.Cleanup(func() { _ = frozen.ThawAPIServer() })
	const limit = 90 * time.Second // the goal is 60 s (docs/benchmarks.md); asserted generously
	var wg sync.WaitGroup
	detected := map[string]time.Duration{}
	var mu sync.Mutex
	for _, s := range []*localfleet.Spoke{holed, killed, frozen} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if err := faults[s.Name](); err != nil {
				t.Errorf("fault %s: %v", s.Name, err)
				return
			}
			if _, ok := poll(ctx, 200*time.Millisecond, limit-time.Since(start), func() bool {
				p, _ := poolReason(ctx, f.Hub.Client, s)
				return p == v1alpha1.PhaseUnreachable
			}); ok {
				mu.Lock()
				detected[s.Name] = time.Since(start)
				mu.Unlock()
			}
		}()
	}
	// Meanwhile the healthy spoke is served as ever.
	changeAndConverge(t, ctx, healthy, "example.com/wave", "1", 10*time.Second)
	wg.Wait()
	for _, name := range []string{holed.Name, killed.Name, frozen.Name} {
		d, ok := detected[name]
		if !ok || d > limit { // poll's last try may come an interval after the limit
			t.Errorf("%s not reported Unreachable within %s", name, limit)
			continue
		}
		_, reason := poolReason(ctx, f.Hub.Client, f.Spoke(name))
		t.Logf("%s reported Unreachable (%s) %s after the fault", name, reason, d.Round(time.Millisecond))
	}
	if probesBefore != 1*len(f.Spokes()) {
		t.Errorf("%d GET /version before the faults on %d healthy spokes, want one per connect", probesBefore, len(f.Spokes()))
	}
	for _, name := range []string{holed.Name, killed.Name, frozen.Name} {
		if err := heal[name](); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*localfleet.Spoke{holed, killed, frozen} {
		if _, err := s.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/healed"] = "yes" }); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*localfleet.Spoke{holed, killed, frozen} {
		waitFor(t, s.Name+" converges after healing", 90*time.Second, func() bool {
			return nodesHold(ctx, s, "infra", hasLabel("example.com/healed", "yes"))
		})
	}
}

// tokenCacheTTL outlasts kube-apiserver's cache of accepted tokens (10 s), after which a
// revoked credential is refused.
const tokenCacheTTL = 11 * time.Second

// A credential revoked on the spoke while its Secret stays the same is noticed by the next
// request that uses it, with no write needed: here the watches that break when the spoke's
// API server restarts are opened again with the revoked token, the spoke answers 401, and the
// pool says Unauthorized. A rotated Secret then brings it back.
func TestRevokedCredentialNoticedWithoutAWrite(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 1)
	opts := testOptions()
	opts.Remote = fleet.Options{}.WithDefaults().Remote // shipped health settings
	opts.Remote.BackoffBase, opts.Remote.BackoffCap = 200*time.Millisecond, 2*time.Second
	startInSync(t, ctx, f, opts, s)

	if err := s.RevokeCredential(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(tokenCacheTTL)
	revokedAt := time.Now()
	if err := s.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := s.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "revoked credential reported Unauthorized", time.Minute, func() bool {
		_, r := poolReason(ctx, f.Hub.Client, s)
		return r == "Unauthorized"
	})
	for _, e := range readAudit(t, s.AuditLogPath) {
		if e.Verb == "patch" && !e.RequestReceived.Before(revokedAt) {
			t.Errorf("a write was sent after the revocation: %s %s", e.Verb, e.RequestURI)
		}
	}
	if err := s.RotateCredential(ctx); err != nil {
		t.Fatal(err)
	}
	changeAndConverge(t, ctx, s, "example.com/after-revoke", "yes", time.Minute)
}

// Node heartbeats (status updates: only a record's resourceVersion moves, and it is stored in
// place) cost the spoke no request from the controller, and the cache still serves it:
// a pool change then takes one patch an object, each carrying a resourceVersion the API server
// accepts (a stale one would fail with 409 and be read again), and another component's taint on
// a Node, kept in the record's interned taint list, is written back with its timeAdded as it was.
func TestQuietSpokeHeartbeatsCostNothingAndDriftIsStillRepaired(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 3)
	opts := testOptions()
	opts.ResyncPeriod = 2 * time.Second
	startInSync(t, ctx, f, opts, s)
	// Another component's taint, with a timeAdded, on one Node: the record
	// keeps it in the interned taint list, and the patches below must write it back as it is.
	nodes, err := s.Nodes(ctx, "infra")
	if err != nil || len(nodes) != 3 {
		t.Fatalf("infra Nodes: %d, %v", len(nodes), err)
	}
	added := metav1.NewTime(time.Date(2026, 11, 26, 4, 15, 7, 123456789, time.UTC))
	foreign := corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute, TimeAdded: &added}
	nodes[0].Spec.Taints = append(nodes[0].Spec.Taints, foreign)
	if err := s.Admin.Update(ctx, &nodes[0]); err != nil {
		t.Fatal(err)
	}
	// What the API server keeps of it (JSON carries timeAdded to the second).
	stored := nodes[0].Spec.Taints[len(nodes[0].Spec.Taints)-1].TimeAdded
	if stored == nil {
		t.Fatal("the API server dropped the taint's timeAdded")
	}
	time.Sleep(8 * time.Second) // quiet: the cache has the update, and the controller has done with it

	controllerRequests := func(offset int) map[string]int {
		out := map[string]int{}
		for _, e := range readAudit(t, s.AuditLogPath)[offset:] {
			if e.User.Username == localfleet.CredentialUser {
				out[e.Verb]++
			}
		}
		return out
	}
	offset := auditLines(t, s)
	if nodes, err = s.Nodes(ctx, "infra"); err != nil || len(nodes) != 3 {
		t.Fatalf("infra Nodes: %d, %v", len(nodes), err)
	}
	for round := range 4 {
		for i := range nodes {
			nodes[i].Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				LastHeartbeatTime: metav1.Now(), Reason: "Heartbeat", Message: time.Now().Format(time.RFC3339Nano)}}
			if err := s.Admin.Status().Update(ctx, &nodes[i]); err != nil {
				t.Fatalf("heartbeat %d of %s: %v", round, nodes[i].Name, err)
			}
		}
		time.Sleep(time.Second)
	}
	time.Sleep(3 * time.Second) // more resyncs
	got := controllerRequests(offset)
	t.Logf("the controller's requests to the spoke during 12 heartbeats and about 5 resyncs: %v", got)
	for verb := range got {
		if verb != "watch" {
			t.Errorf("the controller sent %v while only heartbeats happened, want only watches", got)
			break
		}
	}

	// A pool change after the heartbeats: each Node's patch carries the resourceVersion its
	// record got from its last heartbeat, with no event on that Node since.
	offset = auditLines(t, s)
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
		spec.Labels["example.com/after-heartbeats"] = "yes"
		spec.Taints[0].Value = "after-heartbeats" // the Nodes' taint lists are written whole
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pool change after the heartbeats reaches every Node", 30*time.Second, func() bool {
		return nodesHold(ctx, s, "infra", func(n corev1.Node) bool {
			return hasLabel("example.com/after-heartbeats", "yes")(n) && hasTaint("node-role.kubernetes.io/infra", "after-heartbeats", corev1.TaintEffectNoSchedule)(n)
		})
	})
	n := &corev1.Node{}
	if err := s.Admin.Get(ctx, types.NamespacedName{Name: nodes[0].Name}, n); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == foreign.Key && t.Effect == foreign.Effect })
	if i < 0 || n.Spec.Taints[i].TimeAdded == nil || !n.Spec.Taints[i].TimeAdded.Equal(stored) {
		t.Errorf("the other component's taint after the controller wrote the list: %+v, want %s with timeAdded %s", n.Spec.Taints, foreign.Key, stored.UTC().Format(time.RFC3339Nano))
	}
	time.Sleep(time.Second)
	got = controllerRequests(offset)
	if got["patch"] != 6 || got["get"] != 0 {
		t.Errorf("the controller's requests for a pool change on 3 Machines and 3 Nodes: %v, want 6 patches and no read (a 409 is read again)", got)
	}
}
