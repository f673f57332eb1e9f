package spokecache

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
)

// scriptedEvents is one watch's stream: its events, then err (io.EOF: the server ended it).
type scriptedEvents struct {
	events []watch.Event
	err    error
	closed bool
}

func (s *scriptedEvents) Decode() (watch.EventType, runtime.Object, error) {
	if len(s.events) == 0 {
		return "", nil, s.err
	}
	e := s.events[0]
	s.events = s.events[1:]
	return e.Type, e.Object, nil
}

func (s *scriptedEvents) Close() { s.closed = true }

// scriptedCodec lists with its function (the items of the list it returns, as records) and
// makes records as the kinds' codecs do; the script's watches need no more.
type scriptedCodec func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error)

func (c scriptedCodec) list(ctx context.Context, o metav1.ListOptions) ([]*record, string, error) {
	l, err := c(ctx, o)
	if err != nil {
		return nil, "", err
	}
	var items []runtime.Object
	if err := meta.EachListItem(l, func(o runtime.Object) error { items = append(items, o); return nil }); err != nil {
		return nil, "", err
	}
	la, err := meta.ListAccessor(l)
	if err != nil {
		return nil, "", err
	}
	recs, err := compactObjects(items)
	return recs, la.GetResourceVersion(), err
}

func (scriptedCodec) negotiator() runtime.ClientNegotiator { return nil }

func (scriptedCodec) events(io.ReadCloser, string, map[string]string) (eventDecoder, error) {
	return nil, errors.New("the script's watches are its own")
}

func (scriptedCodec) compact(obj runtime.Object) (*record, error) { return compact(obj) }

// TestKindLoop drives a loop through lists and watches answered from a script, and checks
// the requests it makes (list or watch, at which resourceVersion), what the store holds, and
// when it waits.
func TestKindLoop(t *testing.T) {
	node := func(name, rv string, labels map[string]string) *corev1.Node {
		n := testNode(name, rv, labels)
		return n
	}
	expired := apierrors.NewResourceExpired("too old resource version")
	type answer struct {
		list   *corev1.NodeList
		events *scriptedEvents
		err    error
	}
	tests := []struct {
		name    string
		answers []answer
		// want is the requests, as "list@rv" or "watch@rv"; the last one, past the script,
		// ends the test.
		want      []string
		wantNames []string
		// wantWaits is how many backoff waits the loop took.
		wantWaits int
	}{{
		name: "list, watch, re-watch from the last event and bookmark",
		answers: []answer{
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Node{*node("a", "9", nil)}}},
			{events: &scriptedEvents{events: []watch.Event{
				{Type: watch.Added, Object: node("b", "11", nil)},
				{Type: watch.Modified, Object: node("a", "12", map[string]string{"x": "1"})},
				{Type: watch.Bookmark, Object: node("", "15", nil)},
			}, err: io.EOF}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Deleted, Object: node("b", "16", nil)}}, err: io.EOF}},
		},
		want:      []string{"list@0", "watch@10", "watch@15", "watch@16"},
		wantNames: []string{"a"},
	}, {
		name: "a list without a resourceVersion changes nothing and backs off (it could not be watched from)",
		answers: []answer{
			{list: &corev1.NodeList{Items: []corev1.Node{*node("a", "9", nil)}}},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Node{*node("b", "9", nil)}}},
		},
		want:      []string{"list@0", "list@0", "watch@10"},
		wantNames: []string{"b"},
		wantWaits: 1,
	}, {
		name: "an expired watch whose quorum list fails lists from a quorum read again, after a wait",
		answers: []answer{
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Error, Object: &expired.ErrStatus}}}},
			{err: errors.New("connection reset")},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}, Items: []corev1.Node{*node("c", "19", nil)}}},
		},
		want:      []string{"list@0", "watch@10", "list@", "list@", "watch@20"},
		wantNames: []string{"c"},
		wantWaits: 1,
	}, {
		name: "an expired watch lists again, from a quorum read, at once",
		answers: []answer{
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Error, Object: &expired.ErrStatus}}}},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}, Items: []corev1.Node{*node("c", "19", nil)}}},
		},
		want:      []string{"list@0", "watch@10", "list@", "watch@20"},
		wantNames: []string{"c"},
	}, {
		name: "a watch that expires again within a minute of the last expiry lists again after a wait",
		answers: []answer{
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Error, Object: &expired.ErrStatus}}}},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Error, Object: &expired.ErrStatus}}}},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "30"}, Items: []corev1.Node{*node("c", "29", nil)}}},
		},
		want:      []string{"list@0", "watch@10", "list@", "watch@20", "list@", "watch@30"},
		wantNames: []string{"c"},
		wantWaits: 1,
	}, {
		name: "a watch that expires a minute or more after the last expiry lists again at once",
		answers: []answer{
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Error, Object: &expired.ErrStatus}}}},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}}},
			{err: errors.New("connection reset")}, // its wait moves the clock on a minute
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Error, Object: &expired.ErrStatus}}}},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "30"}}},
		},
		want:      []string{"list@0", "watch@10", "list@", "watch@20", "watch@20", "list@", "watch@30"},
		wantWaits: 1,
	}, {
		name: "a watch refused with 410 Gone lists again too",
		answers: []answer{
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
			{err: apierrors.NewGenericServerResponse(http.StatusGone, http.MethodGet, schema.GroupResource{}, "", "", 0, true)},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}}},
		},
		want: []string{"list@0", "watch@10", "list@", "watch@20"},
	}, {
		name: "a list refused as expired backs off (only a watch's expiry relists at once)",
		answers: []answer{
			{err: expired},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
		},
		want:      []string{"list@0", "list@0", "watch@10"},
		wantWaits: 1,
	}, {
		name: "failures back off; a failed first list is retried from the cache",
		answers: []answer{
			{err: errors.New("connection refused")},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
			{err: errors.New("connection reset")},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Added, Object: node("a", "11", nil)}}, err: io.ErrUnexpectedEOF}},
		},
		want:      []string{"list@0", "list@0", "watch@10", "watch@10", "watch@11"},
		wantNames: []string{"a"},
		wantWaits: 3,
	}, {
		name: "a watch the server ends at once with no event backs off",
		answers: []answer{
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
			{events: &scriptedEvents{err: io.EOF}},
			{events: &scriptedEvents{err: io.EOF}},
		},
		want:      []string{"list@0", "watch@10", "watch@10", "watch@10"},
		wantWaits: 2,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clk := clocktesting.NewFakeClock(time.Now())
			var mu sync.Mutex
			var got []string
			var opened []*scriptedEvents
			next := func(req string) answer {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, req)
				if len(got) > len(tt.answers) {
					cancel() // the script is done
					return answer{err: context.Canceled}
				}
				return tt.answers[len(got)-1]
			}
			st := &kindStore{spec: nodeSpec, notify: func() {}, items: map[string]*record{}, synced: make(chan struct{})}
			l := &kindLoop{store: st, clock: clk,
				codec: scriptedCodec(func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
					a := next("list@" + o.ResourceVersion)
					if a.err != nil {
						return nil, a.err
					}
					if a.list == nil {
						t.Fatalf("a list was answered with %+v", a)
					}
					return a.list, nil
				}),
				watch: func(ctx context.Context, o metav1.ListOptions) (eventDecoder, error) {
					if !o.AllowWatchBookmarks || o.TimeoutSeconds == nil || *o.TimeoutSeconds < int64(watchTimeoutMin.Seconds()) {
						t.Errorf("watch options %+v: want bookmarks and a timeout of at least %s", o, watchTimeoutMin)
					}
					if o.SendInitialEvents != nil {
						t.Errorf("watch options %+v: want no sendInitialEvents (the loop lists)", o)
					}
					a := next("watch@" + o.ResourceVersion)
					if a.err != nil {
						return nil, a.err
					}
					opened = append(opened, a.events)
					return a.events, nil
				},
			}
			done := make(chan struct{})
			go func() { defer close(done); l.run(ctx) }()
			waits := 0
			for {
				select {
				case <-done:
				case <-time.After(10 * time.Millisecond):
					if clk.HasWaiters() {
						waits++
						clk.Step(time.Minute)
					}
					continue
				}
				break
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			if waits != tt.wantWaits {
				t.Errorf("%d backoff waits, want %d", waits, tt.wantWaits)
			}
			var names []string
			for n := range st.items {
				names = append(names, n)
			}
			slices.Sort(names)
			if diff := cmp.Diff(tt.wantNames, names); diff != "" {
				t.Errorf("stored (-want +got):\n%s", diff)
			}
			for i, e := range opened {
				if !e.closed {
					t.Errorf("watch %d was not closed", i)
				}
			}
		})
	}
}

// A kind loop's wait after a failure doubles from 0.8 s to the 30 s cap (each wait 1 to 2 times
// that), and starts again from 0.8 s once 2 minutes pass without a failure.
func TestLoopBackoffGrowsAndResets(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	delay := loopBackoff.DelayWithReset(clk, 2*time.Minute)
	base := loopBackoff.Duration
	for i := range 10 {
		want := min(base<<i, loopBackoff.Cap)
		if d := delay(); d < want || d > 2*want {
			t.Errorf("wait %d: %s, want %s to %s", i+1, d, want, 2*want)
		}
	}
	clk.Step(3 * time.Minute)
	if d := delay(); d < base || d > 2*base {
		t.Errorf("the first wait after 3 quiet minutes: %s, want %s to %s", d, base, 2*base)
	}
}

// A watch reaches the transport as the request streamWatch made, with client-go's user agent
// and bearer token already on it: a wrapper that had to add either would send a clone, which
// x/net keeps for as long as the watch is open.
func TestStreamWatchRequestIsNotCloned(t *testing.T) {
	cfg := &rest.Config{Host: "https://spoke.example:6443", BearerToken: "t0ken", UserAgent: testUserAgent}
	var outer, inner *http.Request
	hc := recordingClient(t, cfg, &outer, &inner, func(req *http.Request) *http.Response {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {runtime.ContentTypeJSON}}, Body: io.NopCloser(strings.NewReader("")), Request: req}
	})
	codecs := serializer.NewCodecFactory(scheme.Scheme)
	request := func(o *metav1.ListOptions) *rest.Request {
		return rest.NewRequestWithClient(&url.URL{Scheme: "https", Host: "spoke.example:6443"}, "", rest.ClientContentConfig{}, nil).
			AbsPath("/api/v1/nodes").VersionedParams(o, metav1.ParameterCodec)
	}
	header := newWatchHeader(cfg)
	header.accept = runtime.ContentTypeJSON
	neg := runtime.NewClientNegotiator(codecs.WithoutConversion(), corev1.SchemeGroupVersion)
	watch := streamWatch(hc, nil, neg, header, request, func(body io.ReadCloser, mediaType string, params map[string]string) (eventDecoder, error) {
		return streamEvents(neg, body, mediaType, params)
	})
	d, err := watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if inner == nil || inner != outer {
		t.Fatalf("the transport got a clone of the watch request (%p, sent %p): a wrapper added a header", inner, outer)
	}
	want := http.Header{"Accept": {runtime.ContentTypeJSON}, "User-Agent": {testUserAgent}, "Authorization": {"Bearer t0ken"}}
	if diff := cmp.Diff(want, inner.Header); diff != "" {
		t.Errorf("watch request header (-want +got):\n%s", diff)
	}
}

// recordingClient returns cfg's HTTP client with client-go's transport wrappers over a
// transport that answers with answer; *outer is set to each request the client is given, and
// *inner to the one that reaches below the wrappers (the same one, unless a wrapper cloned it).
func recordingClient(t *testing.T, cfg *rest.Config, outer, inner **http.Request, answer func(*http.Request) *http.Response) *http.Client {
	t.Helper()
	cfg.WrapTransport = func(http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			*inner = req
			return answer(req), nil
		})
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	under := hc.Transport
	hc.Transport = roundTripFunc(func(req *http.Request) (*http.Response, error) {
		*outer = req
		return under.RoundTrip(req)
	})
	return hc
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
