package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// assertServesFakeNode checks that s's cache holds the fake spoke's Node, trimmed.
func assertServesFakeNode(t *testing.T, s Spoke) {
	t.Helper()
	nodes := &corev1.NodeList{}
	if err := s.List(context.Background(), nodes); err != nil {
		t.Fatal(err)
	}
	want := []corev1.Node{{
		TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "9", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///i-1", Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}},
	}}
	if diff := cmp.Diff(want, nodes.Items); diff != "" {
		t.Errorf("cached nodes (-want +got):\n%s", diff)
	}
}

func TestCacheConnectsAndServesTrimmedCache(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	hub := hubReader(kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "tok", nil)))
	reg := prometheus.NewRegistry()
	opts := fastOptions()
	opts.Metrics = NewMetrics(reg)
	c := NewManager(hub, opts)
	events := notifications(c)

	// Before Start nothing connects, but Ensure records the wish.
	if got := c.Ensure(context.Background(), eligibleCD()); got.Connected || got.Reason != ReasonConnecting {
		t.Fatalf("Ensure before Start = %+v, want Connecting", got)
	}
	if _, err := c.GetSpoke(testCluster); !errors.Is(err, ErrNotConnected) || ReasonOf(err) != ReasonConnecting {
		t.Fatalf("GetSpoke before connect: err=%v reason=%q", err, ReasonOf(err))
	}
	startCache(t, c)

	select {
	case key := <-events:
		if key != testCluster {
			t.Fatalf("event for %v, want %v", key, testCluster)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no connect event; status %+v", c.Status(testCluster))
	}
	eventually(t, "Connected", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
	if got := c.Ensure(context.Background(), eligibleCD()); !got.Connected || got.Reason != ReasonConnected {
		t.Fatalf("Ensure after connect = %+v", got)
	}

	s, err := c.GetSpoke(testCluster)
	if err != nil {
		t.Fatal(err)
	}
	if s.Server() != spokeSrv.srv.URL {
		t.Errorf("Server() = %q, want %q", s.Server(), spokeSrv.srv.URL)
	}
	// Each kind was listed, then watched from the list: no streaming list.
	eventually(t, "a watch a kind", 5*time.Second, func() bool { return spokeSrv.watches.Load() == 3 })
	if l, w, st := spokeSrv.lists.Load(), spokeSrv.watches.Load(), spokeSrv.streams.Load(); l != 3 || w != 3 || st != 0 {
		t.Errorf("connect made %d lists, %d watches and %d streaming lists, want 3, 3 and 0", l, w, st)
	}
	// The Node list came in protobuf, decoded one Node at a time (decodeNodeList).
	if n := spokeSrv.protoNodeLists.Load(); n != 1 {
		t.Errorf("%d Node lists answered in protobuf, want 1", n)
	}
	assertServesFakeNode(t, s)
	if err := s.List(context.Background(), &machinev1beta1.MachineList{}, client.InNamespace(MachineAPINamespace)); err != nil {
		t.Errorf("list machines: %v", err)
	}
	// Types outside the cache are not started on demand.
	if err := s.List(context.Background(), &corev1.ConfigMapList{}); err == nil {
		t.Errorf("listing ConfigMaps from the cache succeeded")
	}
	// The transport refuses what the allow-list does not name, before it leaves the hub.
	before := spokeSrv.count("GET /apis/machine.openshift.io/v1beta1/namespaces/default/machines")
	err = s.Live().List(context.Background(), &machinev1beta1.MachineList{}, client.InNamespace("default"))
	if !errors.Is(err, ErrRequestNotAllowed) {
		t.Errorf("live list in namespace default: err = %v, want ErrRequestNotAllowed", err)
	}
	if after := spokeSrv.count("GET /apis/machine.openshift.io/v1beta1/namespaces/default/machines"); after != before {
		t.Errorf("refused request reached the spoke")
	}
	ms := &machinev1beta1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: MachineAPINamespace, Name: "ms"}}
	if err := s.Patch(context.Background(), ms, client.MergeFrom(ms.DeepCopy())); !errors.Is(err, ErrRequestNotAllowed) {
		t.Errorf("patch MachineSet: err = %v, want ErrRequestNotAllowed", err)
	}
	if err := s.Live().Get(context.Background(), types.NamespacedName{Name: "n1"}, &corev1.Node{}); err == nil {
		t.Errorf("live get of n1 unexpectedly succeeded against the fake (it serves no single objects)")
	}
	if n := spokeSrv.count("GET /api") + spokeSrv.count("GET /apis"); n != 0 {
		t.Errorf("%d discovery requests", n)
	}
	// The probe, the three lists and watches, and the live requests share one HTTP/2
	// connection: one TCP connection and one TLS handshake (requests started together before
	// a connection exists would each dial one).
	if n := spokeSrv.conns.Load(); n != 1 {
		t.Errorf("%d connections to the spoke, want 1", n)
	}
	if got := gaugeValue(t, reg, MetricsPrefix+"connected", map[string]string{"cluster": testCluster.String()}); got != 1 {
		t.Errorf("connected gauge = %v, want 1", got)
	}
	if got := counterSum(t, reg, MetricsPrefix+"requests_refused_total"); got < 1 {
		t.Errorf("requests_refused_total = %v, want >= 1", got)
	}

	// Becoming ineligible disconnects at once; the held Spoke fails fast.
	st := c.Ensure(context.Background(), eligibleCD(func(cd *hivev1.ClusterDeployment) { cd.Spec.PowerState = hivev1.ClusterPowerStateHibernating }))
	if st.Connected || st.Reason != ReasonHibernating {
		t.Errorf("Ensure(hibernating) = %+v", st)
	}
	if err := s.List(context.Background(), &corev1.NodeList{}); !errors.Is(err, ErrNotConnected) || ReasonOf(err) != ReasonHibernating {
		t.Errorf("held Spoke after disconnect: err=%v reason=%q", err, ReasonOf(err))
	}
	if _, err := c.GetSpoke(testCluster); !errors.Is(err, ErrNotConnected) || ReasonOf(err) != ReasonHibernating {
		t.Errorf("GetSpoke after disconnect: err=%v", err)
	}

	c.Forget(testCluster)
	if got := c.Status(testCluster).Reason; got != ReasonNotEnsured {
		t.Errorf("Status after Forget = %q", got)
	}
	if n := seriesCount(t, reg, MetricsPrefix+"connected"); n != 0 {
		t.Errorf("connected series after Forget: %d", n)
	}
}

func TestCacheProbeFailuresDisconnectThenReconnect(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	hub := hubReader(kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "tok", nil)))
	reg := prometheus.NewRegistry()
	opts := fastOptions()
	opts.Metrics = NewMetrics(reg)
	c := NewManager(hub, opts)
	startCache(t, c)
	c.Ensure(context.Background(), eligibleCD())
	eventually(t, "Connected", 5*time.Second, func() bool { return c.Status(testCluster).Connected })

	// A healthy spoke is never probed: only the connect's probe reached it.
	time.Sleep(20 * opts.ProbeInterval)
	if n := spokeSrv.count("GET /version"); n != 1 {
		t.Fatalf("GET /version sent %d times on a healthy connection, want 1 (the connect's)", n)
	}
	// The spoke breaks: its watch streams fail, which makes it suspect, and the probes fail.
	spokeSrv.versionStatus.Store(500)
	spokeSrv.srv.CloseClientConnections()
	eventually(t, "disconnect after failed probes", 5*time.Second, func() bool { return !c.Status(testCluster).Connected })
	if got := c.Status(testCluster).Reason; got != ReasonUnreachable {
		t.Errorf("reason = %q, want Unreachable", got)
	}
	if got := counterSum(t, reg, MetricsPrefix+"connection_errors_total"); got < 1 {
		t.Errorf("connection_errors_total = %v", got)
	}
	spokeSrv.versionStatus.Store(0)
	eventually(t, "reconnect", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
}

func TestCacheReconnectsOn401WithRotatedSecret(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "old")
	secret := kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "old", nil))
	hub := hubReader(secret)
	opts := fastOptions()
	// A huge backoff proves the reconnect after a 401 does not wait for it.
	opts.BackoffBase, opts.BackoffCap = time.Hour, time.Hour
	opts.ProbeFailureThreshold = 1000
	c := NewManager(hub, opts)
	events := notifications(c)
	startCache(t, c)
	c.Ensure(context.Background(), eligibleCD())
	eventually(t, "Connected", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
	first, _ := c.GetSpoke(testCluster)
	time.Sleep(5 * opts.ProbeInterval) // let a periodic probe succeed: the connection is stable

	// Rotate: the spoke now accepts only the new token, and the hub Secret carries it.
	secret.Data[KubeconfigKey] = kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "new", nil)
	if err := hub.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	drain(events)
	spokeSrv.token.Store("new")
	// The watches re-open on a fresh connection and meet the 401 (a real spoke answers the
	// next watch renewal or write the same way).
	spokeSrv.srv.CloseClientConnections()

	eventually(t, "the old Spoke to be closed", 5*time.Second, func() bool {
		return errors.Is(first.List(context.Background(), &corev1.NodeList{}), ErrNotConnected)
	})
	eventually(t, "reconnect with the rotated Secret", 5*time.Second, func() bool {
		s, err := c.GetSpoke(testCluster)
		return err == nil && s != first
	})
	if len(events) == 0 {
		t.Errorf("no notification for the disconnect/reconnect")
	}
}

func TestCacheConnectErrorsAreClassified(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	closed := newFakeSpoke(t, "tok")
	closedURL := closed.srv.URL
	closed.srv.Close()

	tests := map[string]struct {
		kubeconfig []byte
		want       Reason
	}{
		"wrong token":  {kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "nope", nil), ReasonUnauthorized},
		"unknown CA":   {kubeconfigBytes(t, spokeSrv.srv.URL, selfSignedPEM(t), "tok", nil), ReasonTLSError},
		"closed port":  {kubeconfigBytes(t, closedURL, spokeSrv.caPEM(), "tok", nil), ReasonUnreachable},
		"exec refused": {kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "", withExec), ReasonExecRefused},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := NewManager(hubReader(kubeconfigSecret(tc.kubeconfig)), fastOptions())
			startCache(t, c)
			c.Ensure(context.Background(), eligibleCD())
			eventually(t, "reason "+string(tc.want), 5*time.Second, func() bool { return c.Status(testCluster).Reason == tc.want })
			if st := c.Status(testCluster); st.Connected {
				t.Errorf("connected: %+v", st)
			}
		})
	}
}

func TestCacheIPOverrideDialsIPWithURLHostAsTLSName(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	// httptest's certificate is valid for example.com; that name does not resolve here.
	port := spokeSrv.srv.Listener.Addr().(interface{ String() string }).String()
	port = port[len("127.0.0.1:"):]
	server := "https://example.com:" + port
	hub := hubReader(kubeconfigSecret(kubeconfigBytes(t, server, spokeSrv.caPEM(), "tok", nil)))
	c := NewManager(hub, fastOptions())
	startCache(t, c)
	c.Ensure(context.Background(), eligibleCD(func(cd *hivev1.ClusterDeployment) {
		cd.Spec.ControlPlaneConfig.APIServerIPOverride = "127.0.0.1"
	}))
	eventually(t, "Connected via the IP override", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
	s, err := c.GetSpoke(testCluster)
	if err != nil {
		t.Fatal(err)
	}
	if s.Server() != server {
		t.Errorf("Server() = %q, want %q", s.Server(), server)
	}
}

func TestCacheEnsureForgetLeavesNoGoroutines(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	hub := hubReader(kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "tok", nil)))
	c := NewManager(hub, fastOptions())
	startCache(t, c)

	// Warm up once so lazily started process-wide goroutines are not counted.
	c.Ensure(context.Background(), eligibleCD())
	eventually(t, "Connected", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
	c.Forget(testCluster)
	before := settledGoroutines(t, -1)

	for i := range 100 {
		c.Ensure(context.Background(), eligibleCD())
		if i%10 == 0 { // some cycles connect fully, the others are torn down mid-connect
			eventually(t, "Connected", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
		}
		c.Forget(testCluster)
	}
	if after := settledGoroutines(t, before); after > before+2 {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("goroutines: %d before, %d after 100 Ensure/Forget cycles\n%s", before, after, buf[:n])
	}
}

// settledGoroutines waits until the goroutine count is at most target (or stops changing).
func settledGoroutines(t *testing.T, target int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	last := runtime.NumGoroutine()
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n := runtime.NumGoroutine()
		if (target >= 0 && n <= target) || (target < 0 && n == last) {
			return n
		}
		last = n
	}
	return last
}

// notifications registers a Notify function that sends keys to the returned channel, as a
// workqueue's Add would queue them (a full channel drops: the tests read few keys).
func notifications(c *Manager) <-chan types.NamespacedName {
	ch := make(chan types.NamespacedName, 1024)
	c.Notify(func(key types.NamespacedName) {
		select {
		case ch <- key:
		default:
		}
	})
	return ch
}

func drain(ch <-chan types.NamespacedName) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func TestCacheBacksOffFailedConnects(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	hub := hubReader(kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "wrong", nil)))
	opts := fastOptions()
	opts.BackoffBase, opts.BackoffCap = 50*time.Millisecond, 200*time.Millisecond
	c := NewManager(hub, opts)
	startCache(t, c)
	c.Ensure(context.Background(), eligibleCD())
	time.Sleep(time.Second)
	// 0, 50, 100, 200, 200, 200... ms (+ up to 20%): about 6-7 attempts in a second. Without
	// backoff a rejected credential would be retried hundreds of times.
	if n := spokeSrv.count("GET /version"); n < 3 || n > 9 {
		t.Errorf("%d connection attempts in 1s, want 3..9", n)
	}
	if got := c.Status(testCluster).Reason; got != ReasonUnauthorized {
		t.Errorf("reason = %q, want Unauthorized", got)
	}
}

func TestCacheEnsureTrustsHealthyConnectionBetweenSecretReads(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	secret := kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "tok", nil))
	hub := &countingReader{Reader: hubReader(secret)}
	opts := fastOptions()
	opts.SecretRecheckInterval = time.Hour
	c := NewManager(hub, opts)
	startCache(t, c)
	c.Ensure(context.Background(), eligibleCD())
	eventually(t, "Connected", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
	before := hub.gets.Load()
	for range 100 {
		c.Ensure(context.Background(), eligibleCD())
	}
	if n := hub.gets.Load() - before; n != 0 {
		t.Errorf("100 Ensure calls on a healthy connection read the Secret %d times, want 0", n)
	}
}

type countingReader struct {
	client.Reader
	gets atomic.Int64
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets.Add(1)
	return r.Reader.Get(ctx, key, obj, opts...)
}

// connectRechecking connects a Manager that re-reads the kubeconfig Secret on every Ensure to
// spokeSrv, and returns it, the hub reader holding the Secret, the Secret and the connected Spoke.
func connectRechecking(t *testing.T, spokeSrv *fakeSpoke) (*Manager, client.Client, *corev1.Secret, Spoke) {
	t.Helper()
	secret := kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "tok", nil))
	hub := hubReader(secret)
	opts := fastOptions()
	opts.SecretRecheckInterval = time.Nanosecond // re-read the Secret on every Ensure
	c := NewManager(hub, opts)
	startCache(t, c)
	c.Ensure(context.Background(), eligibleCD())
	eventually(t, "Connected", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
	first, err := c.GetSpoke(testCluster)
	if err != nil {
		t.Fatal(err)
	}
	return c, hub, secret, first
}

// touchSecretAndReconnect gives the Secret a new resourceVersion and waits for c to replace the
// connection first with a new one.
func touchSecretAndReconnect(t *testing.T, c *Manager, hub client.Client, secret *corev1.Secret, first Spoke) {
	t.Helper()
	secret.Annotations = map[string]string{"touched": "yes"}
	if err := hub.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	c.Ensure(context.Background(), eligibleCD())
	eventually(t, "a new connection", 5*time.Second, func() bool {
		s, err := c.GetSpoke(testCluster)
		return err == nil && s != first
	})
}

func TestCacheEnsureReconnectsWhenKeyChanges(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	c, hub, secret, first := connectRechecking(t, spokeSrv)

	// Same key: no reconnect.
	for range 10 {
		c.Ensure(context.Background(), eligibleCD())
	}
	time.Sleep(50 * time.Millisecond)
	if s, err := c.GetSpoke(testCluster); err != nil || s != first {
		t.Fatalf("Ensure with an unchanged key reconnected (err=%v)", err)
	}

	// New Secret resourceVersion: reconnect in the background.
	touchSecretAndReconnect(t, c, hub, secret, first)
}

func TestCacheForgetDeletesMetricSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := fastOptions()
	opts.Metrics = NewMetrics(reg)
	c := NewManager(hubReader(), opts) // no Secret
	startCache(t, c)
	st := c.Ensure(context.Background(), eligibleCD())
	if st.Reason != ReasonSecretMissing {
		t.Fatalf("Ensure without Secret = %+v", st)
	}
	if n := seriesCount(t, reg, MetricsPrefix+"connection_errors_total"); n != 1 {
		t.Fatalf("connection_errors_total series = %d, want 1", n)
	}
	c.Forget(testCluster)
	for _, name := range []string{"connected", "connection_errors_total"} {
		if n := seriesCount(t, reg, MetricsPrefix+name); n != 0 {
			t.Errorf("%s series after Forget = %d", name, n)
		}
	}
}

// gateReader blocks the connect workers' Secret reads (those under a deadline: Ensure's own
// read runs under the caller's context, here without one) until release is closed, and
// records the most of them in flight.
func TestCacheBoundsConcurrentConnects(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	spokeSrv.versionGate = make(chan struct{}) // every connect's probe waits here
	secret := kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "tok", nil))
	var objs []client.Object
	var cds []*hivev1.ClusterDeployment
	for i := range 6 {
		ns := fmt.Sprintf("ns-%d", i)
		s := secret.DeepCopy()
		s.Namespace = ns
		objs = append(objs, s)
		cds = append(cds, eligibleCD(func(cd *hivev1.ClusterDeployment) { cd.Namespace = ns }))
	}
	hub := hubReader(objs...)
	opts := fastOptions()
	opts.ConnectTimeout = time.Minute
	opts.RequestTimeout = time.Minute
	opts.MaxConcurrentConnects = 2
	c := NewManager(hub, opts)
	startCache(t, c)
	for _, cd := range cds {
		c.Ensure(context.Background(), cd)
	}
	eventually(t, "2 connects in flight", 5*time.Second, func() bool { return spokeSrv.versionInFlight.Load() == 2 })
	time.Sleep(200 * time.Millisecond) // the other 4 workers are waiting, not connecting
	if m := spokeSrv.versionMaxSeen.Load(); m != 2 {
		t.Fatalf("%d connects in flight, want at most 2", m)
	}
	close(spokeSrv.versionGate)
	for _, cd := range cds {
		key := types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}
		eventually(t, key.String()+" Connected", 10*time.Second, func() bool { return c.Status(key).Connected })
	}
	if m := spokeSrv.versionMaxSeen.Load(); m != 2 {
		t.Errorf("%d connects in flight, want at most 2", m)
	}
}

// With Options.SecretMeta (the controller's metadata-only Secret watch), Ensure reads a
// Secret's content once per resourceVersion, whatever the answer, and knows a deleted Secret
// is missing without a read.
func TestCacheEnsureReadsSecretOncePerVersion(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	secret := kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "tok", nil))
	fakeHub := hubReader(secret)
	hub := &countingReader{Reader: fakeHub}
	opts := fastOptions()
	opts.SecretMeta = fakeHub
	opts.SecretRecheckInterval = time.Nanosecond // must not matter with SecretMeta
	c := NewManager(hub, opts)
	startCache(t, c)
	ctx := context.Background()
	ensureN := func(n int) {
		for range n {
			c.Ensure(ctx, eligibleCD())
		}
	}

	ensureN(1)
	eventually(t, "Connected", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
	ensureN(100)
	if n := hub.gets.Load(); n != 1 {
		t.Fatalf("connect and 100 Ensure calls read the Secret %d times, want 1 (the worker reuses Ensure's read)", n)
	}

	// Invalid content: read once, refused, and not read again while it stays the same.
	secret.Data[KubeconfigKey] = []byte("{{ not yaml")
	if err := fakeHub.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	ensureN(50)
	if got := c.Status(testCluster).Reason; got != ReasonSecretInvalid {
		t.Fatalf("reason = %q, want SecretInvalid", got)
	}
	if n := hub.gets.Load(); n != 2 {
		t.Fatalf("Secret read %d times after one change, want 2", n)
	}

	// Deleted: SecretMissing from the metadata alone.
	if err := fakeHub.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	ensureN(10)
	if got := c.Status(testCluster).Reason; got != ReasonSecretMissing {
		t.Fatalf("reason = %q, want SecretMissing", got)
	}
	if n := hub.gets.Load(); n != 2 {
		t.Fatalf("a deleted Secret was read %d more times, want 0", n-2)
	}

	// Restored: read once, connected.
	restored := kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "tok", nil))
	if err := fakeHub.Create(ctx, restored); err != nil {
		t.Fatal(err)
	}
	ensureN(1)
	eventually(t, "Connected after restore", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
	ensureN(20)
	if n := hub.gets.Load(); n != 3 {
		t.Fatalf("Secret read %d times in all, want 3", n)
	}
}

// The Manager's clock drives its caches too: with a fake one, a kind whose watches fail is
// retried when the clock has gone its backoff past the failure, and not before, however long
// the test takes in real time.
func TestCacheRunsOnTheManagersClock(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	spokeSrv.watchStatus.Store(500) // Internal Server Error
	hub := hubReader(kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "tok", nil)))
	clk := clocktesting.NewFakeClock(time.Now())
	opts := fastOptions()
	opts.Clock = clk
	c := NewManager(hub, opts)
	c.Ensure(context.Background(), eligibleCD())
	startCache(t, c)
	eventually(t, "Connected", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
	if got := c.Status(testCluster).Since; !got.Equal(clk.Now()) {
		t.Errorf("Status.Since %v, want the fake clock's %v", got, clk.Now())
	}
	const kinds = 3 // Nodes, Machines, MachineSets
	eventually(t, "every kind's watch refused", 5*time.Second, func() bool { return spokeSrv.watches.Load() >= kinds })
	time.Sleep(2*firstLoopWait + 100*time.Millisecond) // past the first wait in real time: nothing may come of it
	if n := spokeSrv.watches.Load() + spokeSrv.lists.Load(); n != 2*kinds {
		t.Fatalf("%d lists and watches before the fake clock moved, want %d: a kind retried on the real clock", n, 2*kinds)
	}
	clk.Step(2 * firstLoopWait) // past the first wait, jitter included
	eventually(t, "every kind retried once the fake clock passed its backoff", 5*time.Second, func() bool {
		return spokeSrv.watches.Load() >= 2*kinds
	})
}

// firstLoopWait is a kind loop's first wait after a failure (spokecache's loopBackoff, before
// its jitter); a longer one fails TestCacheRunsOnTheManagersClock.
const firstLoopWait = 800 * time.Millisecond

// TestCacheRidesOutTooManyRequests: a busy spoke answers 429 (API Priority and
// Fairness; from 1.37, a consistent list its watch cache cannot serve in time
// when ConsistentListFromCacheSkipTimeoutFallback is on). client-go retries a
// list after its Retry-After, so the connect goes through with no error, and a
// probe answered 429 finds the spoke up: a throttled spoke is never called
// Unreachable, nor disconnected. Every list and watch accepts gzip.
func TestCacheRidesOutTooManyRequests(t *testing.T) {
	spokeSrv := newFakeSpoke(t, "tok")
	spokeSrv.throttleLists.Store(2)
	spokeSrv.versionStatus.Store(http.StatusTooManyRequests)
	hub := hubReader(kubeconfigSecret(kubeconfigBytes(t, spokeSrv.srv.URL, spokeSrv.caPEM(), "tok", nil)))
	reg := prometheus.NewRegistry()
	opts := fastOptions()
	opts.Metrics = NewMetrics(reg)
	opts.ProbeFailureThreshold = 1
	c := NewManager(hub, opts)
	startCache(t, c)
	c.Ensure(context.Background(), eligibleCD())
	eventually(t, "Connected", 5*time.Second, func() bool { return c.Status(testCluster).Connected })
	if n := spokeSrv.throttled.Load(); n != 2 {
		t.Errorf("%d lists answered 429, want 2", n)
	}
	if n := spokeSrv.lists.Load(); n != 3 {
		t.Errorf("%d lists answered, want 3 (one per kind, each retried until it went through)", n)
	}
	if got := counterSum(t, reg, MetricsPrefix+"connection_errors_total"); got != 0 {
		t.Errorf("connection_errors_total = %v after 429s that client-go retried, want 0", got)
	}

	// The watches fail, which makes the spoke suspect, and its probe is
	// answered 429: with a threshold of one failed probe, it stays connected.
	probes := spokeSrv.count("GET /version")
	spokeSrv.srv.CloseClientConnections()
	eventually(t, "a probe after the watches failed", 5*time.Second, func() bool {
		return spokeSrv.count("GET /version") > probes
	})
	time.Sleep(5 * opts.ProbeInterval)
	if st := c.Status(testCluster); !st.Connected {
		t.Errorf("a spoke whose probes were answered 429 is %s: %s", st.Reason, st.Message)
	}
	spokeSrv.mu.Lock()
	defer spokeSrv.mu.Unlock()
	for _, enc := range spokeSrv.encodings {
		if !strings.Contains(enc, "gzip") {
			t.Errorf("a list or watch sent Accept-Encoding %q, want gzip (a list over 128 KiB comes compressed)", enc)
		}
	}
}
