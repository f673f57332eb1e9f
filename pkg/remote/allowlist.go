package remote

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// MachineAPINamespace is the only spoke namespace the hub reads or writes.
const MachineAPINamespace = nmsync.MachineAPINamespace

// Verbs and resources, as used in metrics labels.
const (
	verbGet   = "get"
	verbList  = "list"
	verbWatch = "watch"
	verbPatch = "patch"

	resourceNodes       = "nodes"
	resourceMachines    = "machines"
	resourceMachineSets = "machinesets"
	resourceVersion     = "version"
)

// allowRequest is the least-authority allow-list. path is the URL path with the server's path
// prefix already removed. It returns the verb and resource for metrics and whether the request
// may leave the hub. Allowed:
//
//	GET   /version
//	GET   /api/v1/nodes[/<name>]                (get, list, watch)
//	PATCH /api/v1/nodes/<name>
//	GET   /apis/machine.openshift.io/v1beta1/namespaces/openshift-machine-api/{machines,machinesets}[/<name>]
//	PATCH /apis/machine.openshift.io/v1beta1/namespaces/openshift-machine-api/machines/<name>
//
// Everything else (other methods, subresources such as /status or /proxy, other namespaces or
// resources, all-namespace lists, discovery) is refused.
func allowRequest(method, path string, query url.Values) (verb, resource string, ok bool) {
	verb = strings.ToLower(method)
	if path == "/version" {
		if method == http.MethodGet {
			return verbGet, resourceVersion, true
		}
		return verb, resourceVersion, false
	}
	var rest []string
	switch {
	case strings.HasPrefix(path, "/api/v1/nodes"):
		resource, rest = resourceNodes, segments(strings.TrimPrefix(path, "/api/v1/nodes"))
	case strings.HasPrefix(path, "/apis/machine.openshift.io/v1beta1/namespaces/"+MachineAPINamespace+"/"):
		parts := segments(strings.TrimPrefix(path, "/apis/machine.openshift.io/v1beta1/namespaces/"+MachineAPINamespace))
		if len(parts) == 0 || (parts[0] != resourceMachines && parts[0] != resourceMachineSets) {
			return verb, "other", false
		}
		resource, rest = parts[0], parts[1:]
	default:
		return verb, "other", false
	}
	if rest == nil { // a malformed path such as /api/v1/nodesX or //
		return verb, resource, false
	}
	switch len(rest) {
	case 0: // collection
		if method != http.MethodGet {
			return verb, resource, false
		}
		if w := query.Get("watch"); w == "true" || w == "1" {
			return verbWatch, resource, true
		}
		return verbList, resource, true
	case 1: // one object
		if len(validation.IsDNS1123Subdomain(rest[0])) != 0 {
			return verb, resource, false
		}
		switch {
		case method == http.MethodGet:
			return verbGet, resource, true
		case method == http.MethodPatch && resource != resourceMachineSets:
			return verbPatch, resource, true
		}
	}
	return verb, resource, false
}

// segments splits the remainder of a path after a collection prefix: "" -> [], "/x" -> [x],
// "/x/y" -> [x y]. It returns nil when the remainder does not start with "/" or has an empty
// segment (".../nodes/", ".../nodesfoo", "//").
func segments(rest string) []string {
	if rest == "" {
		return []string{}
	}
	if !strings.HasPrefix(rest, "/") {
		return nil
	}
	parts := strings.Split(rest[1:], "/")
	for _, p := range parts {
		if p == "" {
			return nil
		}
	}
	return parts
}

// guardTransport enforces the allow-list, records metrics and reports authentication failures.
// It is installed with rest.Config.WrapTransport, i.e. right above the TLS transport, so it sees
// every request exactly as it would go on the wire, including redirects.
type guardTransport struct {
	next    http.RoundTripper
	host    string // the only URL host requests may go to
	prefix  string // path prefix of the server URL ("" for most)
	metrics *Metrics
	now     func() time.Time
	// observe is called after every request that reached the spoke with the response code (0 on
	// transport error) and error; it must not block.
	observe func(method string, code int, err error)
	// fence, if set, is asked before a request that is not a GET is sent (Options.WriteFence).
	fence func() error
}

func (g *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	path := req.URL.Path
	okPrefix := g.prefix == "" || strings.HasPrefix(path, g.prefix+"/")
	verb, resource, ok := allowRequest(req.Method, strings.TrimPrefix(path, g.prefix), req.URL.Query())
	if !ok || !okPrefix || req.URL.Host != g.host || req.URL.RawPath != "" {
		g.metrics.refused(strings.ToLower(req.Method))
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("%w: %s %s", ErrRequestNotAllowed, req.Method, path)
	}
	if g.fence != nil && req.Method != http.MethodGet {
		if err := g.fence(); err != nil {
			// Not the spoke's doing: nothing is observed, and nothing was sent.
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, fmt.Errorf("%s %s: %w", req.Method, path, err)
		}
	}
	start := g.now()
	resp, err := g.next.RoundTrip(req)
	code, codeLabel := 0, "error"
	if resp != nil {
		code = resp.StatusCode
		codeLabel = strconv.Itoa(code)
	}
	g.metrics.request(verb, resource, codeLabel, g.now().Sub(start).Seconds(), verb != verbWatch)
	if g.observe != nil {
		g.observe(req.Method, code, err)
		if verb == verbWatch && err == nil && resp.Body != nil {
			resp.Body = &watchBody{ReadCloser: resp.Body, method: req.Method, observe: g.observe}
		}
	}
	return resp, err
}

// watchBody reports a watch stream that breaks, as opposed to one the server ends (EOF) or
// the reader closes: a broken stream is how a dead spoke shows itself while nothing else is
// sent (the HTTP/2 health check closes the connection, and every stream on it fails).
type watchBody struct {
	io.ReadCloser
	method  string
	observe func(method string, code int, err error)
	closed  atomic.Bool
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && !b.closed.Load() {
		b.observe(b.method, 0, err)
	}
	return n, err
}

func (b *watchBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}
