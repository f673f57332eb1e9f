package remote

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestAllowRequest(t *testing.T) {
	const (
		ms = "/apis/machine.openshift.io/v1beta1/namespaces/openshift-machine-api/machinesets"
		m  = "/apis/machine.openshift.io/v1beta1/namespaces/openshift-machine-api/machines"
		n  = "/api/v1/nodes"
	)
	type want struct {
		Verb, Resource string
		OK             bool
	}
	tests := map[string]struct {
		method, path, query string
		want                want
	}{
		// Allowed.
		"probe":                  {"GET", "/version", "", want{"get", "version", true}},
		"list nodes":             {"GET", n, "", want{"list", "nodes", true}},
		"watch nodes":            {"GET", n, "watch=true&resourceVersion=1", want{"watch", "nodes", true}},
		"watch nodes 1":          {"GET", n, "watch=1", want{"watch", "nodes", true}},
		"get node":               {"GET", n + "/ip-10-0-1-2.ec2.internal", "", want{"get", "nodes", true}},
		"patch node":             {"PATCH", n + "/worker-1", "", want{"patch", "nodes", true}},
		"list machines":          {"GET", m, "labelSelector=a%3Db", want{"list", "machines", true}},
		"watch machines":         {"GET", m, "watch=true", want{"watch", "machines", true}},
		"get machine":            {"GET", m + "/m1", "", want{"get", "machines", true}},
		"patch machine":          {"PATCH", m + "/m1", "", want{"patch", "machines", true}},
		"list machinesets":       {"GET", ms, "", want{"list", "machinesets", true}},
		"watch machinesets":      {"GET", ms, "watch=true", want{"watch", "machinesets", true}},
		"get machineset":         {"GET", ms + "/ms1", "", want{"get", "machinesets", true}},
		"list nodes watch=false": {"GET", n, "watch=false", want{"list", "nodes", true}},

		// Refused: writes other than PATCH of one Machine or Node.
		"patch machineset":  {"PATCH", ms + "/ms1", "", want{"patch", "machinesets", false}},
		"put node":          {"PUT", n + "/worker-1", "", want{"put", "nodes", false}},
		"put machine":       {"PUT", m + "/m1", "", want{"put", "machines", false}},
		"delete node":       {"DELETE", n + "/worker-1", "", want{"delete", "nodes", false}},
		"delete machine":    {"DELETE", m + "/m1", "", want{"delete", "machines", false}},
		"delete collection": {"DELETE", m, "", want{"delete", "machines", false}},
		"create machine":    {"POST", m, "", want{"post", "machines", false}},
		"create node":       {"POST", n, "", want{"post", "nodes", false}},
		"patch collection":  {"PATCH", n, "", want{"patch", "nodes", false}},
		"head node":         {"HEAD", n + "/worker-1", "", want{"head", "nodes", false}},
		"post version":      {"POST", "/version", "", want{"post", "version", false}},
		// Refused: subresources and odd paths.
		"node status":        {"PATCH", n + "/worker-1/status", "", want{"patch", "nodes", false}},
		"node proxy":         {"GET", n + "/worker-1/proxy/metrics", "", want{"get", "nodes", false}},
		"machine status":     {"PATCH", m + "/m1/status", "", want{"patch", "machines", false}},
		"machineset scale":   {"GET", ms + "/ms1/scale", "", want{"get", "machinesets", false}},
		"trailing slash":     {"GET", n + "/", "", want{"get", "nodes", false}},
		"nodes prefix trick": {"GET", n + "evil", "", want{"get", "nodes", false}},
		"dot dot":            {"GET", n + "/..", "", want{"get", "nodes", false}},
		"upper-case name":    {"GET", n + "/Worker", "", want{"get", "nodes", false}},
		"double slash":       {"GET", n + "//x", "", want{"get", "nodes", false}},
		"version subpath":    {"GET", "/version/x", "", want{"get", "other", false}},
		// Refused: other namespaces, resources, groups, versions, discovery.
		"machines other ns":    {"GET", "/apis/machine.openshift.io/v1beta1/namespaces/default/machines", "", want{"get", "other", false}},
		"machines all ns":      {"GET", "/apis/machine.openshift.io/v1beta1/machines", "", want{"get", "other", false}},
		"machine ns prefix":    {"GET", "/apis/machine.openshift.io/v1beta1/namespaces/openshift-machine-api-x/machines", "", want{"get", "other", false}},
		"secrets in mapi ns":   {"GET", "/apis/machine.openshift.io/v1beta1/namespaces/openshift-machine-api/secrets", "", want{"get", "other", false}},
		"core secrets":         {"GET", "/api/v1/namespaces/openshift-machine-api/secrets", "", want{"get", "other", false}},
		"pods":                 {"GET", "/api/v1/pods", "", want{"get", "other", false}},
		"other version":        {"GET", "/apis/machine.openshift.io/v1/namespaces/openshift-machine-api/machines", "", want{"get", "other", false}},
		"discovery api":        {"GET", "/api", "", want{"get", "other", false}},
		"discovery apis":       {"GET", "/apis", "", want{"get", "other", false}},
		"openapi":              {"GET", "/openapi/v3", "", want{"get", "other", false}},
		"healthz":              {"GET", "/healthz", "", want{"get", "other", false}},
		"root":                 {"GET", "/", "", want{"get", "other", false}},
		"mapi ns itself":       {"GET", "/api/v1/namespaces/openshift-machine-api", "", want{"get", "other", false}},
		"ns collection prefix": {"GET", "/apis/machine.openshift.io/v1beta1/namespaces/openshift-machine-api/", "", want{"get", "other", false}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			verb, resource, ok := allowRequest(tc.method, tc.path, q)
			if diff := cmp.Diff(tc.want, want{verb, resource, ok}); diff != "" {
				t.Errorf("allowRequest(%s %s?%s) (-want +got):\n%s", tc.method, tc.path, tc.query, diff)
			}
		})
	}
}

type recordingRT struct{ requests []string }

func (r *recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.requests = append(r.requests, req.Method+" "+req.URL.String())
	code := http.StatusOK
	if req.URL.Path == "/prefix/api/v1/nodes/locked" {
		code = http.StatusUnauthorized
	}
	return &http.Response{StatusCode: code, Body: http.NoBody, Request: req}, nil
}

func TestGuardTransport(t *testing.T) {
	type observed struct {
		Method string
		Code   int
	}
	tests := map[string]struct {
		method, url  string
		wantSent     bool
		wantObserved []observed
	}{
		"allowed":             {"GET", "https://api:6443/prefix/api/v1/nodes", true, []observed{{"GET", 200}}},
		"401 observed":        {"GET", "https://api:6443/prefix/api/v1/nodes/locked", true, []observed{{"GET", 401}}},
		"missing prefix":      {"GET", "https://api:6443/api/v1/nodes", false, nil},
		"other host":          {"GET", "https://evil:6443/prefix/api/v1/nodes", false, nil},
		"escaped slash":       {"GET", "https://api:6443/prefix/api/v1/nodes/a%2Fb", false, nil},
		"refused by the list": {"DELETE", "https://api:6443/prefix/api/v1/nodes/n1", false, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			next := &recordingRT{}
			var got []observed
			g := &guardTransport{
				next: next, host: "api:6443", prefix: "/prefix", metrics: NewMetrics(reg), now: time.Now,
				observe: func(method string, code int, err error) { got = append(got, observed{method, code}) },
			}
			req, err := http.NewRequest(tc.method, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := g.RoundTrip(req)
			if tc.wantSent {
				if err != nil {
					t.Fatalf("RoundTrip: %v", err)
				}
				resp.Body.Close()
			} else if !errors.Is(err, ErrRequestNotAllowed) {
				t.Fatalf("RoundTrip err = %v, want ErrRequestNotAllowed", err)
			}
			if sent := len(next.requests) > 0; sent != tc.wantSent {
				t.Errorf("sent = %v, want %v", sent, tc.wantSent)
			}
			if diff := cmp.Diff(tc.wantObserved, got); diff != "" {
				t.Errorf("observed (-want +got):\n%s", diff)
			}
			refused := counterSum(t, reg, MetricsPrefix+"requests_refused_total")
			sent := counterSum(t, reg, MetricsPrefix+"requests_total")
			if want := map[bool][2]float64{true: {0, 1}, false: {1, 0}}[tc.wantSent]; refused != want[0] || sent != want[1] {
				t.Errorf("metrics refused=%v sent=%v, want %v", refused, sent, want)
			}
		})
	}
}

// TestGuardFencesWrites: with a closed WriteFence a patch is not sent, and
// is neither observed (it says nothing of the spoke) nor counted as sent;
// reads go through. An open fence lets the patch go.
func TestGuardFencesWrites(t *testing.T) {
	errClosed := errors.New("lease lapsed")
	for name, tc := range map[string]struct {
		method   string
		fence    error
		wantSent bool
	}{
		"patch, fence closed": {"PATCH", errClosed, false},
		"patch, fence open":   {"PATCH", nil, true},
		"get, fence closed":   {"GET", errClosed, true},
	} {
		t.Run(name, func(t *testing.T) {
			next := &recordingRT{}
			observed := 0
			g := &guardTransport{
				next: next, host: "api:6443", metrics: NewMetrics(prometheus.NewRegistry()), now: time.Now,
				observe: func(string, int, error) { observed++ },
				fence:   func() error { return tc.fence },
			}
			req, err := http.NewRequest(tc.method, "https://api:6443/api/v1/nodes/n1", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := g.RoundTrip(req)
			if sent := len(next.requests) > 0; sent != tc.wantSent {
				t.Fatalf("sent = %v (err %v), want %v", sent, err, tc.wantSent)
			}
			if !tc.wantSent {
				if !errors.Is(err, errClosed) || observed != 0 {
					t.Errorf("fenced: err %v, observed %d; want the fence's error and nothing observed", err, observed)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		})
	}
}
