package remote

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

func TestConnObserveAuthFailures(t *testing.T) {
	tests := map[string]struct {
		method  string
		code    int
		err     error
		wantSig bool
	}{
		"200":          {http.MethodGet, 200, nil, false},
		"401 on read":  {http.MethodGet, 401, nil, true},
		"401 on patch": {http.MethodPatch, 401, nil, true},
		"403 on read":  {http.MethodGet, 403, nil, true},
		"403 on patch (admission webhooks deny with 403)": {http.MethodPatch, 403, nil, false},
		"404":             {http.MethodGet, 404, nil, false},
		"transport error": {http.MethodGet, 0, errors.New("boom"), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cn := &conn{server: "https://api:6443", authFailed: make(chan struct{}, 1)}
			cn.observe(tc.method, tc.code, tc.err)
			cn.observe(tc.method, tc.code, tc.err) // never blocks
			got := false
			select {
			case <-cn.authFailed:
				got = true
			default:
			}
			if diff := cmp.Diff(tc.wantSig, got); diff != "" {
				t.Errorf("auth failure signalled (-want +got):\n%s", diff)
			}
			if (tc.err != nil || tc.wantSig) != (cn.lastError() != nil) {
				t.Errorf("lastError = %v", cn.lastError())
			}
		})
	}
}

func TestBackoffIsExponentialWithJitterAndCapped(t *testing.T) {
	opts := Options{BackoffBase: 100, BackoffCap: 1000}.withDefaults()
	bo := opts.newBackoff()
	wantBase := []int64{100, 200, 400, 800, 1000, 1000, 1000}
	for i, base := range wantBase {
		d := int64(bo.Step())
		if d < base || float64(d) > float64(base)*(1+backoffJitter) {
			t.Errorf("step %d = %d, want in [%d, %d]", i, d, base, int64(float64(base)*(1+backoffJitter)))
		}
	}
}

// A spoke connection has a transport of its own, outside client-go's TLS transport cache (whose
// key would hold one more copy of the kubeconfig's CA, certificate and key), and its HTTP/2
// connection keeps no header compression table either way.
func TestConnTransportIsPrivateWithoutHeaderTables(t *testing.T) {
	kc := kubeconfigBytes(t, "https://127.0.0.1:6443", selfSignedPEM(t), "token", nil)
	opts := fastOptions().withDefaults()
	p, err := prepare(context.Background(), hubReader(kubeconfigSecret(kc)), targetFor(eligibleCD()), &opts)
	if err != nil {
		t.Fatal(err)
	}
	cn, err := NewManager(hubReader(), fastOptions()).newConn(types.NamespacedName{Namespace: testNamespace, Name: testCDName}, p)
	if err != nil {
		t.Fatal(err)
	}
	// client-go's wrappers (user agent, credentials) go around newConn's guard, and the guard
	// around what client-go built.
	var under http.RoundTripper
	for rt := http.RoundTripper(cn.http.Transport); under == nil; {
		switch w := rt.(type) {
		case *guardTransport:
			under = w.next
		case utilnet.RoundTripperWrapper:
			rt = w.WrappedRoundTripper()
		default:
			t.Fatalf("%T wraps no transport the test knows", rt)
		}
	}
	tr, ok := under.(*http.Transport)
	if !ok {
		t.Fatalf("the connection's transport is a %T, not a private *http.Transport", under)
	}
	if tr.HTTP2 == nil || tr.HTTP2.MaxDecoderHeaderTableSize != headerTableSize || tr.HTTP2.MaxEncoderHeaderTableSize != headerTableSize {
		t.Fatalf("HTTP/2 config %+v, want both header tables of %d byte", tr.HTTP2, headerTableSize)
	}
	if tr.TLSNextProto["h2"] == nil {
		t.Fatal("the transport does not speak HTTP/2")
	}
}
