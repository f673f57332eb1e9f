package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	delay  time.Duration // before each event
}

func (s *scriptedEvents) Decode() (watch.EventType, runtime.Object, error) {
	if len(s.events) == 0 {
		return "", nil, s.err
	}
	time.Sleep(s.delay)
	e := s.events[0]
	s.events = s.events[1:]
	return e.Type, e.Object, nil
}

func (s *scriptedEvents) Close() { s.closed = true }

// blockedEvents is a watch that sends nothing until its request is cancelled.
type blockedEvents struct{ ctx context.Context }

func (b *blockedEvents) Decode() (watch.EventType, runtime.Object, error) {
	<-b.ctx.Done()
	return "", nil, b.ctx.Err()
}

func (b *blockedEvents) Close() {}

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
		list    *corev1.NodeList
		events  *scriptedEvents
		blocked bool // a watch that sends nothing until it is cancelled
		err     error
	}
	end := node("", "10", nil)
	end.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "", nil)
	tests := []struct {
		name    string
		answers []answer
		// stream: the loop starts with streaming lists (as it runs); otherwise it lists.
		stream bool
		// want is the requests, as "list@rv", "watch@rv" or "stream@rv" (a streaming list);
		// the last one, past the script, ends the test.
		want      []string
		wantNames []string
		// wantWaits is how many backoff waits the loop took.
		wantWaits int
		// wantListOnly: the loop left the spoke marked as one that does not stream lists.
		wantListOnly bool
	}{{
		name:   "changes before the end of the initial events apply to them, as client-go's watch-list applies them",
		stream: true,
		answers: []answer{
			{events: &scriptedEvents{events: []watch.Event{
				{Type: watch.Added, Object: node("a", "5", nil)},
				{Type: watch.Added, Object: node("b", "6", nil)},
				{Type: watch.Modified, Object: node("a", "7", map[string]string{"x": "1"})},
				{Type: watch.Deleted, Object: node("b", "8", nil)},
				{Type: watch.Added, Object: node("c", "9", nil)},
				{Type: watch.Bookmark, Object: end},
				{Type: watch.Modified, Object: node("c", "11", nil)},
			}, err: io.EOF}},
		},
		want:      []string{"stream@0", "watch@11"},
		wantNames: []string{"a", "c"},
	}, {
		name:   "a streamed watch that expires streams again at once, from a quorum read",
		stream: true,
		answers: []answer{
			{events: &scriptedEvents{events: []watch.Event{
				{Type: watch.Added, Object: node("a", "5", nil)},
				{Type: watch.Bookmark, Object: end},
				{Type: watch.Error, Object: &expired.ErrStatus},
			}}},
			{events: &scriptedEvents{events: []watch.Event{
				{Type: watch.Added, Object: node("d", "21", nil)},
				{Type: watch.Bookmark, Object: end},
				{Type: watch.Modified, Object: node("d", "22", nil)},
			}, err: io.EOF}},
		},
		want:      []string{"stream@0", "stream@", "watch@22"},
		wantNames: []string{"d"},
	}, {
		name:   "a streaming list refused with 400 lists on this connection, without marking the spoke",
		stream: true,
		answers: []answer{
			{err: apierrors.NewBadRequest("bad")},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Node{*node("a", "9", nil)}}},
		},
		want:      []string{"stream@0", "list@0", "watch@10"},
		wantNames: []string{"a"},
	}, {
		name:   "a streaming list fills the store at the end of its initial events and goes on watching on the same stream",
		stream: true,
		answers: []answer{
			{events: &scriptedEvents{events: []watch.Event{
				{Type: watch.Added, Object: node("a", "9", nil)},
				{Type: watch.Added, Object: node("b", "8", nil)},
				{Type: watch.Bookmark, Object: node("", "9", nil)}, // not the end yet
				{Type: watch.Bookmark, Object: end},
				{Type: watch.Deleted, Object: node("b", "12", nil)},
			}, err: io.EOF}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Added, Object: node("c", "13", nil)}}, err: io.EOF}},
		},
		want:      []string{"stream@0", "watch@12", "watch@13"},
		wantNames: []string{"a", "c"},
	}, {
		name:   "a streaming list slower in all than the timeout, but never silent that long, is not given up",
		stream: true,
		answers: []answer{
			{events: &scriptedEvents{delay: 20 * time.Millisecond, events: []watch.Event{
				{Type: watch.Added, Object: node("a", "9", nil)},
				{Type: watch.Added, Object: node("b", "8", nil)},
				{Type: watch.Added, Object: node("c", "7", nil)},
				{Type: watch.Added, Object: node("d", "6", nil)},
				{Type: watch.Bookmark, Object: end},
				{Type: watch.Modified, Object: node("d", "11", nil)},
			}, err: io.EOF}},
		},
		want:      []string{"stream@0", "watch@11"},
		wantNames: []string{"a", "b", "c", "d"},
	}, {
		name:   "a streaming list refused as invalid (no WatchList on the server) lists at once, then for good",
		stream: true,
		answers: []answer{
			{err: invalid},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Node{*node("a", "9", nil)}}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Error, Object: &expired.ErrStatus}}}},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}, Items: []corev1.Node{*node("c", "19", nil)}}},
		},
		want:         []string{"stream@0", "list@0", "watch@10", "list@", "watch@20"},
		wantNames:    []string{"c"},
		wantListOnly: true,
	}, {
		name:   "a streaming list whose initial events do not end in time (a server that ignores sendInitialEvents) lists instead",
		stream: true,
		answers: []answer{
			{blocked: true},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Node{*node("a", "9", nil)}}},
		},
		want:      []string{"stream@0", "list@0", "watch@10"},
		wantNames: []string{"a"},
	}, {
		name:   "a stream that ends before its initial events do backs off and streams again; one that ends right after them (no event of its own) too; an expired watch streams from a quorum read",
		stream: true,
		answers: []answer{
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Added, Object: node("a", "9", nil)}}, err: io.EOF}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Bookmark, Object: end}}, err: io.ErrUnexpectedEOF}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Error, Object: &expired.ErrStatus}}}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Added, Object: node("d", "21", nil)}, {Type: watch.Bookmark, Object: end}}, err: io.EOF}},
		},
		want:      []string{"stream@0", "stream@0", "watch@10", "stream@", "watch@10"},
		wantNames: []string{"d"},
		wantWaits: 3,
	}, {
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
		name: "an expired watch lists again, from a quorum read, at once",
		answers: []answer{
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
			{events: &scriptedEvents{events: []watch.Event{{Type: watch.Error, Object: &expired.ErrStatus}}}},
			{list: &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}, Items: []corev1.Node{*node("c", "19", nil)}}},
		},
		want:      []string{"list@0", "watch@10", "list@", "watch@20"},
		wantNames: []string{"c"},
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
			st := &kindStore{spec: spokeKinds[0], notify: func() {}, items: map[string]*record{}, synced: make(chan struct{})}
			listOnly := new(atomic.Bool)
			listOnly.Store(!tt.stream)
			l := &kindLoop{store: st, clock: clk, listOnly: listOnly, initialTimeout: 50 * time.Millisecond,
				list: listItems(func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
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
					req := "watch@"
					if o.SendInitialEvents != nil && *o.SendInitialEvents {
						req = "stream@"
						if o.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
							t.Errorf("streaming list options %+v: want resourceVersionMatch NotOlderThan", o)
						}
					}
					a := next(req + o.ResourceVersion)
					if a.err != nil {
						return nil, a.err
					}
					if a.blocked {
						return &blockedEvents{ctx: ctx}, nil
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
			if got := listOnly.Load(); tt.stream && got != tt.wantListOnly {
				t.Errorf("the spoke marked as not streaming lists: %v, want %v", got, tt.wantListOnly)
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

// generatedEvents is a streaming list of n Nodes, each made as it is read and carrying
// payload bytes that no record keeps (a real Node's status: images, conditions); it calls
// atEnd before its end marker, then sends nothing until ctx ends.
type generatedEvents struct {
	ctx     context.Context
	n, sent int
	payload int
	end     *corev1.Node
	atEnd   func()
}

func (g *generatedEvents) Decode() (watch.EventType, runtime.Object, error) {
	switch {
	case g.sent < g.n:
		g.sent++
		n := testNode(fmt.Sprintf("n%d", g.sent), strconv.Itoa(g.sent), map[string]string{"pool": "p"})
		n.Status.Images = []corev1.ContainerImage{{Names: []string{strings.Repeat("x", g.payload)}}}
		return watch.Added, n, nil
	case g.sent == g.n:
		g.sent++
		g.atEnd()
		return watch.Bookmark, g.end, nil
	}
	<-g.ctx.Done()
	return "", nil, g.ctx.Err()
}

func (g *generatedEvents) Close() {}

// A streaming list keeps what it has read as records, not as the decoded objects, until its
// end: at a connect, every kind of every connecting spoke is in its initial events at once.
// 400 Nodes of 64 KiB each are 25 MiB decoded; their records, a few hundred bytes each.
func TestStreamingListKeepsRecordsNotObjects(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	end := testNode("", "1000", nil)
	end.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	var before, atEnd goruntime.MemStats
	g := &generatedEvents{ctx: ctx, n: 400, payload: 64 << 10, end: end, atEnd: func() {
		goruntime.GC()
		goruntime.ReadMemStats(&atEnd)
	}}
	st := &kindStore{spec: spokeKinds[0], notify: func() {}, items: map[string]*record{}, synced: make(chan struct{})}
	watches := 0
	l := &kindLoop{store: st, clock: clocktesting.NewFakeClock(time.Now()), listOnly: new(atomic.Bool), initialTimeout: time.Minute,
		list: listItems(func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			t.Error("the loop listed; it should have streamed")
			return nil, errors.New("no list here")
		}),
		watch: func(ctx context.Context, _ metav1.ListOptions) (eventDecoder, error) {
			if watches++; watches > 1 {
				return &blockedEvents{ctx: ctx}, nil
			}
			return g, nil
		},
	}
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	done := make(chan struct{})
	go func() { defer close(done); l.run(ctx) }()
	select {
	case <-st.synced:
	case <-time.After(30 * time.Second):
		t.Fatal("the streaming list did not end")
	}
	cancel()
	<-done
	if got := len(st.items); got != g.n {
		t.Fatalf("stored %d Nodes, want %d", got, g.n)
	}
	decoded := int64(g.n * g.payload)
	if grew := int64(atEnd.HeapAlloc) - int64(before.HeapAlloc); grew > decoded/4 {
		t.Errorf("the live heap grew by %d KiB before the end of the initial events (the decoded Nodes are %d KiB): the loop holds them", grew>>10, decoded>>10)
	}
}

// A watch reaches the transport as the request streamWatch made, with client-go's user agent
// and bearer token already on it: a wrapper that had to add either would send a clone, which
// x/net keeps for as long as the watch is open.
func TestStreamWatchRequestIsNotCloned(t *testing.T) {
	cfg := &rest.Config{Host: "https://spoke.example:6443", BearerToken: "t0ken", UserAgent: UserAgent}
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
	watch := streamWatch(hc, nil, runtime.NewClientNegotiator(codecs.WithoutConversion(), corev1.SchemeGroupVersion), header, request, nil)
	d, err := watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if inner == nil || inner != outer {
		t.Fatalf("the transport got a clone of the watch request (%p, sent %p): a wrapper added a header", inner, outer)
	}
	want := http.Header{"Accept": {runtime.ContentTypeJSON}, "User-Agent": {UserAgent}, "Authorization": {"Bearer t0ken"}}
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
