package remote

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"mime"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	restwatch "k8s.io/client-go/rest/watch"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Watch timeouts, as client-go's Reflector picks them: each watch asks the API server to end it
// after a random time between watchTimeoutMin and twice that, so the watches of a fleet do not
// renew in step.
const watchTimeoutMin = 5 * time.Minute

// kindLoop fills one kind's store with a streaming list (a watch that starts with the kind's
// objects, sendInitialEvents), then keeps watching on the same stream; it re-watches from the last
// event when a watch ends and streams the whole kind again when the server says the resourceVersion
// has expired. A server that refuses streaming lists gets a list and then a watch from the list's
// resourceVersion, on this connection and the spoke's later ones. It reads the watch stream in its
// own goroutine: one goroutine a kind, where client-go's Reflector runs three (its loop, a resync
// timer that this cache never needs, and a stream reader handing events over a channel). Failures
// back off as the Reflector's do (0.8 s doubling to 30 s, with jitter, reset after 2 minutes
// without one).
//
// Why stream: a connect then costs the spoke one request a kind instead of two (with the probe,
// 4 in all instead of 7), and a restarted hub connects every spoke of its shard at once. On a
// kube-apiserver 1.36 holding 42 Nodes, Machines and MachineSets, a connect cost its API server
// 16 ms of CPU with lists and 11 ms streamed.
type kindLoop struct {
	store   *kindStore
	log     logr.Logger
	cluster string // logged with the kind at each call
	// list returns the kind's objects and the list's resourceVersion.
	list  func(ctx context.Context, o metav1.ListOptions) ([]any, string, error)
	watch func(ctx context.Context, o metav1.ListOptions) (eventDecoder, error)
	clock clock.Clock
	// listOnly: the server does not stream lists; list, then watch. Set when a streaming list
	// is refused as invalid (Kubernetes 1.27 and later without the WatchList feature, which
	// 1.33 turns off by default). Shared by a spoke's loops, and kept by the Manager for the
	// spoke's later connects. A streaming list that goes initialTimeout without an event before
	// the end of its initial events (a stall, or a server before 1.27, which ignores
	// sendInitialEvents and never ends them) makes only this loop list, on this connection.
	listOnly *atomic.Bool
	// initialTimeout bounds the silence before the end of a streaming list's initial events
	// (defaultInitialTimeout).
	initialTimeout time.Duration
}

// defaultInitialTimeout is how long a streaming list may go without an event before the end
// of its initial events, before the loop gives up streaming and lists instead.
const defaultInitialTimeout = 10 * time.Second

// eventDecoder reads one watch stream's events (client-go's rest/watch Decoder).
type eventDecoder interface {
	Decode() (watch.EventType, runtime.Object, error)
	Close()
}

var loopBackoff = wait.Backoff{Duration: 800 * time.Millisecond, Factor: 2, Jitter: 1, Cap: 30 * time.Second}

// errShortWatch is a watch that the server ended at once without an event: retried with
// backoff, so a server that closes every watch cannot make the loop spin.
var errShortWatch = errors.New("watch ended within a second without an event")

func (l *kindLoop) run(ctx context.Context) {
	delay := loopBackoff.DelayWithReset(l.clock, 2*time.Minute)
	rv := ""          // "" until listed, and again when the server has expired it
	listRV := "0"     // the first list may come from the API server's watch cache
	listHere := false // this connection lists: its streaming list was left unfinished
	for ctx.Err() == nil {
		var err error
		watching := rv != ""
		switch {
		case watching:
			rv, err = l.watchFrom(ctx, rv)
		case listHere || l.listOnly.Load():
			rv, err = l.relist(ctx, listRV)
		default:
			rv, err = l.streamList(ctx, listRV)
			var no *noStreamingList
			if errors.As(err, &no) {
				l.log.V(1).Info("the spoke does not stream lists; listing", "cluster", l.cluster, "kind", l.store.spec.gvk.Kind, "reason", err.Error())
				if no.refused {
					l.listOnly.Store(true)
				} else {
					listHere = true
				}
				continue // at once: nothing failed
			}
		}
		if !watching && rv != "" {
			// Listed: after an expired watch the next list must be at least as new as what
			// this cache saw, a quorum read, as client-go's Reflector does then.
			listRV = ""
		}
		if err == nil || ctx.Err() != nil {
			continue
		}
		// A watch (or the watch a streaming list became) whose resourceVersion expired.
		if rv != "" && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)) {
			l.log.V(4).Info("relisting", "cluster", l.cluster, "kind", l.store.spec.gvk.Kind, "reason", err.Error())
			rv = "" // at once: only a list failure backs off
			continue
		}
		l.log.V(2).Info("list or watch failed; retrying", "cluster", l.cluster, "kind", l.store.spec.gvk.Kind, "err", err.Error())
		t := l.clock.NewTimer(delay())
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
}

// relist lists the kind into the store and returns the list's resourceVersion.
func (l *kindLoop) relist(ctx context.Context, rv string) (string, error) {
	items, listRV, err := l.list(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return "", err
	}
	if err := l.store.Replace(items, listRV); err != nil {
		return "", err
	}
	return listRV, nil
}

// listItems adapts a list call to kindLoop.list: the list's items and resourceVersion.
func listItems(list func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error)) func(context.Context, metav1.ListOptions) ([]any, string, error) {
	return func(ctx context.Context, o metav1.ListOptions) ([]any, string, error) {
		l, err := list(ctx, o)
		if err != nil {
			return nil, "", err
		}
		var items []any
		if err := meta.EachListItem(l, func(o runtime.Object) error { items = append(items, o); return nil }); err != nil {
			return nil, "", err
		}
		la, err := meta.ListAccessor(l)
		if err != nil {
			return nil, "", err
		}
		return items, la.GetResourceVersion(), nil
	}
}

// noStreamingList is a streaming list that the server refused as invalid (refused: it does not
// stream lists, so the spoke is listed from then on) or left unfinished (listed on this
// connection only: a stall, or a server that ignores the parameter).
type noStreamingList struct {
	refused bool
	why     string
}

func (e *noStreamingList) Error() string { return "the server does not stream lists: " + e.why }

// streamList opens a watch that starts with every object of the kind at rv or newer
// (sendInitialEvents, from the API server's watch cache when rv is "0"), replaces the store
// with them once the server marks their end, and then reads the same stream as watchFrom does.
// Changes that come before that end apply to the initial objects, as client-go's watch-list
// applies them. It returns "" until the store is replaced, and a *noStreamingList when the
// server refuses the request (422, for good; 400, for this connection) or goes initialTimeout
// without an event before the initial events end.
func (l *kindLoop) streamList(ctx context.Context, rv string) (string, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timeout := l.initialTimeout
	if timeout <= 0 {
		timeout = defaultInitialTimeout
	}
	var timedOut atomic.Bool
	timer := time.AfterFunc(timeout, func() { timedOut.Store(true); cancel() })
	defer timer.Stop()
	start := l.clock.Now()
	d, err := l.watch(wctx, l.watchOptions(rv, true))
	if err != nil {
		switch {
		case apierrors.IsInvalid(err):
			return "", &noStreamingList{refused: true, why: err.Error()}
		case apierrors.IsBadRequest(err):
			return "", &noStreamingList{why: err.Error()}
		case timedOut.Load():
			return "", &noStreamingList{why: fmt.Sprintf("no answer within %s", timeout)}
		}
		return "", err
	}
	defer d.Close()
	// The initial objects are kept as records from the start, by name (a kind's objects are
	// in one namespace), not as the decoded objects: at a connect, every kind of every spoke
	// connecting holds its whole list here at once, and a decoded Node is many times its
	// record (a real one's status alone, with its images, is kilobytes).
	recs := map[string]*record{}
	for {
		typ, obj, err := d.Decode()
		switch {
		case err != nil && timedOut.Load():
			return "", &noStreamingList{why: fmt.Sprintf("%d objects, then nothing for %s", len(recs), timeout)}
		case errors.Is(err, io.EOF):
			return "", fmt.Errorf("the watch ended before its initial events did: %w", io.ErrUnexpectedEOF)
		case err != nil:
			return "", err
		}
		// The bound is on silence, not on the whole: a loaded server may take longer to send a
		// large kind, but never pauses between its initial events (if the timer has just
		// fired, the next Decode fails and the loop lists).
		timer.Reset(timeout)
		if typ == watch.Error {
			return "", apierrors.FromObject(obj)
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return "", err
		}
		switch typ {
		case watch.Added, watch.Modified:
			r, err := compact(obj)
			if err != nil {
				return "", err
			}
			recs[r.name()] = r
			continue
		case watch.Deleted:
			delete(recs, m.GetName())
			continue
		case watch.Bookmark:
		default:
			return "", fmt.Errorf("unexpected %q watch event before the initial events ended", typ)
		}
		if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
			continue // a bookmark is not yet the end
		}
		timer.Stop()
		end := m.GetResourceVersion()
		l.store.replaceRecords(slices.Collect(maps.Values(recs)))
		if timedOut.Load() {
			// The timer fired as the end came: the objects are complete, the stream is
			// cancelled. Watch on from the end at once.
			return end, nil
		}
		// recs is dead from here on (the stack maps say so): the records the store did not
		// keep go with the next GC while the stream is read on.
		return l.readEvents(d, end, start)
	}
}

// watchOptions are a watch's options from rv: bookmarks, and a timeout picked at random between
// watchTimeoutMin and twice that; a streaming list's (stream) also asks for the initial events.
func (l *kindLoop) watchOptions(rv string, stream bool) metav1.ListOptions {
	timeout := int64((watchTimeoutMin + rand.N(watchTimeoutMin)).Seconds())
	o := metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout}
	if stream {
		o.SendInitialEvents = ptr.To(true)
		o.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	return o
}

// watchFrom watches from rv until the stream ends, and returns the resourceVersion of the last
// event read (bookmarks included).
func (l *kindLoop) watchFrom(ctx context.Context, rv string) (string, error) {
	start := l.clock.Now()
	d, err := l.watch(ctx, l.watchOptions(rv, false))
	if err != nil {
		return rv, err
	}
	defer d.Close()
	return l.readEvents(d, rv, start)
}

// readEvents applies a watch's events to the store until the stream ends, and returns the
// resourceVersion of the last event read (bookmarks included), rv if none.
func (l *kindLoop) readEvents(d eventDecoder, rv string, start time.Time) (string, error) {
	for events := 0; ; events++ {
		typ, obj, err := d.Decode()
		switch {
		case errors.Is(err, io.EOF):
			if events == 0 && l.clock.Since(start) < time.Second {
				return rv, errShortWatch
			}
			return rv, nil
		case err != nil:
			return rv, err
		}
		switch typ {
		case watch.Added, watch.Modified:
			err = l.store.Add(obj)
		case watch.Deleted:
			err = l.store.Delete(obj)
		case watch.Bookmark:
		case watch.Error:
			return rv, apierrors.FromObject(obj)
		default:
			return rv, fmt.Errorf("unexpected watch event %q", typ)
		}
		if err != nil {
			return rv, err
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return rv, err
		}
		rv = m.GetResourceVersion()
	}
}

// streamWatch opens watches with hc, to be read in the caller's goroutine. request builds each
// one's URL (path and parameters), limiter is waited on as for any request, header is sent
// with each, and neg decodes a failed response's Status. events reads the stream:
// nil reads it as client-go does, with neg's stream decoder for the response's content type.
func streamWatch(hc *http.Client, limiter flowcontrol.RateLimiter, neg runtime.ClientNegotiator, header watchHeader,
	request func(o *metav1.ListOptions) *rest.Request, events func(io.ReadCloser) eventDecoder) func(context.Context, metav1.ListOptions) (eventDecoder, error) {
	return func(ctx context.Context, o metav1.ListOptions) (eventDecoder, error) {
		o.Watch = true
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, request(&o).URL().String(), nil)
		if err != nil {
			return nil, err
		}
		req.Header = header.build()
		if limiter != nil {
			if err := limiter.Wait(ctx); err != nil {
				return nil, err
			}
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		mediaType, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if resp.StatusCode != http.StatusOK {
			defer resp.Body.Close()
			return nil, statusError(resp, neg, mediaType, params)
		}
		if events != nil {
			return events(resp.Body), nil
		}
		objects, eventSerializer, framer, err := neg.StreamDecoder(mediaType, params)
		if err != nil {
			_ = resp.Body.Close()
			return nil, err
		}
		if mediaType == runtime.ContentTypeProtobuf {
			return &protoEvents{body: resp.Body, events: eventSerializer, objects: objects}, nil
		}
		return restwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(resp.Body), eventSerializer), objects), nil
	}
}

// protoEvents reads a protobuf watch stream (each event a frame behind its 4-byte length) one
// event at a time into a buffer borrowed from a pool that every spoke shares, and gives the
// buffer back once the event is decoded: decoding copies whatever it keeps. client-go's reader
// keeps a buffer per watch instead, grown to the largest event it has seen and never shrunk: a
// real Node with its images is tens of KiB, which would stay with every spoke for as long as
// its Node watch lives.
type protoEvents struct {
	body    io.ReadCloser
	events  runtime.Decoder // the metav1.WatchEvent frames
	objects runtime.Decoder // the objects they carry
	header  [4]byte
}

// Event frames are refused above maxEventBytes (as client-go's reader does above 16 MiB), and
// buffers above pooledEventBytes go back to the heap, not to the pool.
const (
	maxEventBytes    = 16 << 20
	pooledEventBytes = 1 << 20
)

var eventBuffers = sync.Pool{New: func() any { return new([]byte) }}

func borrowEventBuffer() *[]byte { return eventBuffers.Get().(*[]byte) }

// returnEventBuffer gives a borrowed buffer back to the pool, unless it grew above
// pooledEventBytes (then the heap has it).
func returnEventBuffer(buf *[]byte) {
	if cap(*buf) <= pooledEventBytes {
		eventBuffers.Put(buf)
	}
}

func (d *protoEvents) Decode() (watch.EventType, runtime.Object, error) {
	if _, err := io.ReadFull(d.body, d.header[:]); err != nil {
		return "", nil, err // io.EOF when the stream ends between events
	}
	n := binary.BigEndian.Uint32(d.header[:])
	if n > maxEventBytes {
		return "", nil, fmt.Errorf("watch event of %d bytes is larger than %d", n, maxEventBytes)
	}
	buf := borrowEventBuffer()
	defer returnEventBuffer(buf)
	if cap(*buf) < int(n) {
		*buf = make([]byte, n)
	}
	frame := (*buf)[:n]
	if _, err := io.ReadFull(d.body, frame); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // a frame cut short is not a clean end
		}
		return "", nil, err
	}
	var got metav1.WatchEvent
	if _, _, err := d.events.Decode(frame, nil, &got); err != nil {
		return "", nil, err
	}
	switch typ := watch.EventType(got.Type); typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Error, watch.Bookmark:
		obj, err := runtime.Decode(d.objects, got.Object.Raw)
		if err != nil {
			return "", nil, fmt.Errorf("unable to decode watch event: %w", err)
		}
		return typ, obj, nil
	default:
		return "", nil, fmt.Errorf("got invalid watch event type: %v", got.Type)
	}
}

func (d *protoEvents) Close() { _ = d.body.Close() }

// statusError is the API error a failed response carries (a Status), or one made from its code.
func statusError(resp *http.Response, neg runtime.ClientNegotiator, mediaType string, params map[string]string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if d, err := neg.Decoder(mediaType, params); err == nil {
		if obj, _, err := d.Decode(body, nil, nil); err == nil {
			if s, ok := obj.(*metav1.Status); ok && s.Status == metav1.StatusFailure {
				return &apierrors.StatusError{ErrStatus: *s}
			}
		}
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodGet, schema.GroupResource{}, "", string(body), 0, true)
}
