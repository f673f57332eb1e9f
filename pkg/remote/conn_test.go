package remote

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
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

// A spoke connection's HTTP/2 transport keeps no header compression table either way.
func TestConnHasNoHeaderTables(t *testing.T) {
	c := NewManager(hubReader(), fastOptions())
	cn, err := c.newConn(types.NamespacedName{Namespace: "ns", Name: "cd"}, &prepared{cfg: &rest.Config{Host: "https://127.0.0.1:6443",
		TLSClientConfig: rest.TLSClientConfig{CAData: selfSignedPEM(t)}, BearerToken: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	var rt http.RoundTripper = cn.http.Transport
	for rt != nil {
		switch w := rt.(type) {
		case *http.Transport:
			if w.HTTP2 == nil || w.HTTP2.MaxDecoderHeaderTableSize != headerTableSize || w.HTTP2.MaxEncoderHeaderTableSize != headerTableSize {
				t.Fatalf("HTTP/2 config %+v, want both header tables of %d byte", w.HTTP2, headerTableSize)
			}
			if w.TLSNextProto["h2"] == nil {
				t.Fatal("the transport does not speak HTTP/2")
			}
			return
		case *guardTransport:
			rt = w.next
		case utilnet.RoundTripperWrapper:
			rt = w.WrappedRoundTripper()
		default:
			t.Fatalf("%T wraps no transport the test knows", rt)
		}
	}
	t.Fatal("no *http.Transport under the connection's client")
}
