package int_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// changeAndConverge adds label k=v to a pool and waits until every Node holds it.
func changeAndConverge(t *testing.T, ctx context.Context, s *localfleet.Spoke, k, v string, timeout time.Duration) time.Duration {
	t.Helper()
	if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels[k] = v }); err != nil {
		t.Fatal(err)
	}
	return waitFor(t, s.Name+" converges on "+k+"="+v, timeout, func() bool { return nodesHold(ctx, s, "infra", hasLabel(k, v)) })
}

func auditLines(t *testing.T, s *localfleet.Spoke) int { return len(readAudit(t, s.AuditLogPath)) }

func poolReason(ctx context.Context, hub client.Client, s *localfleet.Spoke) (string, string) {
	st, err := poolSync(ctx, hub, s, "infra")
	if err != nil {
		return "", ""
	}
	return st.Status.Phase, st.Status.Reason
}

func TestUnreachableAndBlackHoledSpokesDoNotHoldOthers(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 3)
	for _, s := range f.Spokes() {
		addInfraPool(t, ctx, s, 2)
	}
	healthy, holed, down := f.Spokes()[0], f.Spokes()[1], f.Spokes()[2]
	proxy, err := holed.UseProxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := startInSync(t, ctx, f, testOptions(), f.Spokes()...)

	proxy.BlackHole(true)
	if err := down.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*localfleet.Spoke{holed, down} {
		if _, err := s.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/wave"] = "1" }); err != nil {
			t.Fatal(err)
		}
	}
	// The healthy spoke converges as fast as ever while the others hang.
	changeAndConverge(t, ctx, healthy, "example.com/wave", "1", 10*time.Second)

	// Asking for a broken spoke's client returns at once, whatever state it is in.
	for range 20 {
		for _, s := range []*localfleet.Spoke{holed, down} {
			start := time.Now()
			_, _ = r.Spokes.GetSpoke(s.Key())
			_ = r.Spokes.Status(s.Key())
			if d := time.Since(start); d > 50*time.Millisecond {
				t.Errorf("GetSpoke(%s) took %s", s.Name, d)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range []*localfleet.Spoke{holed, down} {
		waitFor(t, s.Name+" reported Unreachable", time.Minute, func() bool {
			p, _ := poolReason(ctx, f.Hub.Client, s)
			return p == v1alpha1.PhaseUnreachable
		})
		_, reason := poolReason(ctx, f.Hub.Client, s)
		t.Logf("%s: reason %s", s.Name, reason)
	}
	changeAndConverge(t, ctx, healthy, "example.com/wave", "2", 10*time.Second)

	// Healed, both converge without a restart.
	proxy.BlackHole(false)
	if err := down.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*localfleet.Spoke{holed, down} {
		waitFor(t, s.Name+" converges after healing", 90*time.Second, func() bool {
			return nodesHold(ctx, s, "infra", hasLabel("example.com/wave", "1"))
		})
	}
}

// badKubeconfig returns the spoke's current hub kubeconfig changed by mutate.
func badKubeconfig(t *testing.T, ctx context.Context, s *localfleet.Spoke, mutate func(*clientcmdapi.Config)) []byte {
	t.Helper()
	kc, err := s.HubKubeconfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	mutate(cfg)
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBadKubeconfigSecrets(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 6*time.Minute)
	f := startFleet(t, ctx, 2)
	for _, s := range f.Spokes() {
		addInfraPool(t, ctx, s, 2)
	}
	good, bad := f.Spokes()[0], f.Spokes()[1]
	startInSync(t, ctx, f, testOptions(), bad)
	original, err := bad.HubKubeconfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wrongCA := badKubeconfig(t, ctx, bad, func(c *clientcmdapi.Config) {
		for _, cl := range c.Clusters {
			cl.CertificateAuthorityData = f.Hub.Config.CAData // a real CA, not the spoke's
		}
	})
	execUser := badKubeconfig(t, ctx, bad, func(c *clientcmdapi.Config) {
		for _, u := range c.AuthInfos {
			u.Token = ""
			u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", Args: []string{"-c", "touch /tmp/hub-node-metadata-pwned"}, APIVersion: "client.authentication.k8s.io/v1"}
		}
	})
	insecure := badKubeconfig(t, ctx, bad, func(c *clientcmdapi.Config) {
		for _, cl := range c.Clusters {
			cl.CertificateAuthorityData = nil
			cl.InsecureSkipTLSVerify = true
		}
	})

	cases := []struct {
		name   string
		data   map[string][]byte // nil deletes the Secret
		revoke bool
		reason remote.Reason
	}{
		{name: "missing Secret", data: nil, reason: remote.ReasonSecretMissing},
		{name: "no kubeconfig key", data: map[string][]byte{"raw-kubeconfig": original}, reason: remote.ReasonSecretInvalid},
		{name: "garbage", data: map[string][]byte{"kubeconfig": []byte("\x00{{not: a kubeconfig")}, reason: remote.ReasonSecretInvalid},
		{name: "exec user", data: map[string][]byte{"kubeconfig": execUser}, reason: remote.ReasonExecRefused},
		{name: "insecure-skip-tls-verify", data: map[string][]byte{"kubeconfig": insecure}, reason: remote.ReasonInsecureRefused},
		{name: "wrong CA", data: map[string][]byte{"kubeconfig": wrongCA}, reason: remote.ReasonTLSError},
		{name: "revoked token", data: map[string][]byte{"kubeconfig": original}, revoke: true, reason: remote.ReasonUnauthorized},
	}
	label := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.revoke {
				// Revoked before the Secret is restored: restored first, the controller may
				// connect before the revocation, and the API server then keeps accepting the
				// token for up to 10 s (its authentication cache), past the pool change below.
				if err := bad.RevokeCredential(ctx); err != nil {
					t.Fatal(err)
				}
				if err := bad.SetSecretData(ctx, tc.data); err != nil {
					t.Fatal(err)
				}
			} else if err := bad.SetSecretData(ctx, tc.data); err != nil {
				t.Fatal(err)
			}
			// A healthy connection is trusted for SecretRecheckInterval (1s here).
			time.Sleep(1500 * time.Millisecond)
			if _, err := bad.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/case"] = caseLabel(tc.name) }); err != nil {
				t.Fatal(err)
			}
			last := ""
			defer func() {
				if t.Failed() {
					t.Logf("last pool state: %s", last)
				}
			}()
			waitFor(t, "reason "+string(tc.reason), time.Minute, func() bool {
				p, r := poolReason(ctx, f.Hub.Client, bad)
				st, _ := poolSync(ctx, f.Hub.Client, bad, "infra")
				last = p + "/" + r + ": " + st.Status.Message
				return p == v1alpha1.PhaseUnreachable && r == string(tc.reason)
			})
			st, _ := poolSync(ctx, f.Hub.Client, bad, "infra")
			for _, secret := range []string{"BEGIN CERTIFICATE", "eyJ", "token:"} {
				if strings.Contains(st.Status.Message, secret) {
					t.Errorf("status message leaks credential material: %q", st.Status.Message)
				}
			}
			// Nothing reaches the spoke while its Secret is bad, and nothing changes there.
			before := auditLines(t, bad)
			label++
			changeAndConverge(t, ctx, good, "example.com/other-carries-on", strings.Repeat("x", label), 15*time.Second)
			if n := auditLines(t, bad) - before; n > 0 {
				t.Errorf("%d requests reached the spoke with a bad Secret", n)
			}
			if nodesHold(ctx, bad, "infra", hasLabel("example.com/case", caseLabel(tc.name))) {
				t.Error("the pool change reached the spoke through a bad Secret")
			}
		})
	}
	if !hasEvent(ctx, f.Hub.Client, bad.Name, bad.Name, fleet.EventDisconnected) {
		t.Error("no SpokeUnavailable Event on the ClusterDeployment")
	}
	// A rotated credential restores service without a restart.
	if err := bad.RotateCredential(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "recovered after rotation", time.Minute, func() bool {
		return nodesHold(ctx, bad, "infra", hasLabel("example.com/case", caseLabel("revoked token")))
	})
}

func caseLabel(name string) string {
	return strings.NewReplacer(" ", "-", "-", "-").Replace(name)
}

// It counts the goroutines and heap of a whole process, so the cycles run in
// a process of their own (runIsolated), beside the other tests.
func TestConnectDisconnectCyclesDoNotLeak(t *testing.T) {
	if runIsolated(t) {
		return
	}
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 2)
	cache := startRemote(t, ctx, f, remote.Options{ProbeInterval: time.Second})
	cd, err := s.ClusterDeployment(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hibernating := cd.DeepCopy()
	hibernating.Spec.PowerState = hivev1.ClusterPowerStateHibernating
	// Each cycle disconnects while a Spoke is held, by turns as the cluster hibernates and as it
	// is forgotten. The held Spoke fails with the disconnect's own reason, not the one its
	// worker closes it with as it stops ("Connecting"), whichever of the two runs first.
	cycle := func(i int) {
		cache.Ensure(ctx, cd)
		waitFor(t, "", 30*time.Second, func() bool { return cache.Status(s.Key()).Connected })
		sp, err := cache.GetSpoke(s.Key())
		if err != nil {
			t.Fatal(err)
		}
		if err := sp.List(ctx, &hivev1.MachinePoolList{}); err == nil {
			t.Fatal("the spoke handle served a kind outside its allow-list")
		}
		want := remote.ReasonNotEnsured
		if i%2 == 1 {
			want = remote.ReasonHibernating
			cache.Ensure(ctx, hibernating)
		}
		cache.Forget(s.Key())
		if err := sp.List(ctx, &corev1.NodeList{}); !errors.Is(err, remote.ErrNotConnected) || remote.ReasonOf(err) != want {
			t.Fatalf("cycle %d: the held Spoke after the disconnect: err=%v reason=%q, want %q", i, err, remote.ReasonOf(err), want)
		}
	}
	for i := range 5 { // warm up pools and caches
		cycle(i)
	}
	g0, h0 := settle()
	for i := range 100 {
		cycle(i)
	}
	g1, h1 := settle()
	t.Logf("100 connect/disconnect cycles: goroutines %d -> %d, heap %.1f -> %.1f MiB", g0, g1, float64(h0)/(1<<20), float64(h1)/(1<<20))
	if g1 > g0+10 {
		t.Errorf("goroutines grew from %d to %d", g0, g1)
	}
	if h1 > h0+8<<20 {
		t.Errorf("heap grew from %d to %d bytes", h0, h1)
	}

}

// startRemote runs a remote.Manager on f's hub until the test ends (or ctx), and fails the test
// if it returns an error.
func startRemote(t *testing.T, ctx context.Context, f *localfleet.Fleet, opts remote.Options) *remote.Manager {
	t.Helper()
	cache := remote.NewManager(f.Hub.Client, opts)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cache.Start(cctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("remote manager: %v", err)
		}
	})
	return cache
}

// settle waits for background teardown and returns goroutines and live heap.
func settle() (int, uint64) {
	var ms runtime.MemStats
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapAlloc
}

// A connect lists each kind and then watches it from the list's resourceVersion, so the spoke
// sees the probe, three lists and three watches, and no streaming list (a watch with
// sendInitialEvents, which costs a kube-apiserver more CPU). The same with the WatchList feature
// on (1.36's default) and off (1.33's): on real API servers, the cache holds what the spoke holds.
func TestConnectListsThenWatchesEachKind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args map[string]string
	}{
		{name: "WatchList on"},
		{name: "WatchList off", args: map[string]string{"feature-gates": "WatchList=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t, 3*time.Minute)
			f := startFleetWith(t, ctx, 1, func(o *localfleet.Options) { o.SpokeArgs = tc.args })
			s := f.Spokes()[0]
			addInfraPool(t, ctx, s, 3)
			cache := startRemote(t, ctx, f, remote.Options{})
			cd, err := s.ClusterDeployment(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cache.Ensure(ctx, cd)
			waitFor(t, "", 30*time.Second, func() bool { return cache.Status(s.Key()).Connected })
			sp, err := cache.GetSpoke(s.Key())
			if err != nil {
				t.Fatal(err)
			}
			// The pool: 3 Nodes, 3 Machines, 1 MachineSet.
			for l, want := range map[client.ObjectList]int{&corev1.NodeList{}: 3, &machinev1beta1.MachineList{}: 3, &machinev1beta1.MachineSetList{}: 1} {
				if err := sp.List(ctx, l, client.InNamespace(localfleet.MachineAPINamespace)); err != nil {
					t.Fatal(err)
				}
				if n := meta.LenList(l); n != want {
					t.Errorf("%T holds %d items, want %d", l, n, want)
				}
			}
			// The watches are opened once the lists are in: wait for them to start.
			want := [3]int{1, 3, 3} // probes, lists, watches (a watch counted when its response starts)
			var got [3]int
			var streaming []string
			waitFor(t, "", 30*time.Second, func() bool {
				got, streaming = [3]int{}, nil
				for _, e := range readAudit(t, s.AuditLogPath) {
					if strings.Contains(e.RequestURI, "sendInitialEvents") {
						streaming = append(streaming, e.RequestURI)
					}
					switch {
					case e.Verb == "get" && strings.HasPrefix(e.RequestURI, "/version"):
						got[0]++
					case e.Verb == "list":
						got[1]++
					case e.Verb == "watch" && e.Stage == "ResponseStarted":
						got[2]++
					}
				}
				return got[2] >= want[2]
			})
			if got != want || len(streaming) > 0 {
				t.Errorf("the connect sent (probes, lists, watches) %v and streaming lists %q, want %v and none", got, streaming, want)
			}
		})
	}
}

// isolatedEnv marks the test binary run again by runIsolated.
const isolatedEnv = "HUB_NODE_METADATA_ISOLATED_TEST"

// runIsolated runs the calling test alone in a process of its own (this
// test binary again, for that test only) and reports whether it did: the
// caller returns then, and its body runs in the child, where nothing else
// shares the process's goroutines and heap. The parent runs in parallel with
// the other tests.
func runIsolated(t *testing.T) bool {
	t.Helper()
	if os.Getenv(isolatedEnv) != "" {
		return false
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), isolatedEnv+"=1")
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "remote_test.go:") || strings.HasPrefix(l, "--- ") {
			t.Log(l)
		}
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("%s in a process of its own did not pass (%v)\n%s", t.Name(), err, tail(string(out), 40))
	}
	return true
}
