package spokecache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	restwatch "k8s.io/client-go/rest/watch"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// Watch timeouts, as client-go's Reflector picks them: each watch asks the API server to end it
// after a random time between watchTimeoutMin and twice that, so the watches of a fleet do not
// renew in step.
const watchTimeoutMin = 5 * time.Minute

// kindLoop fills one kind's store with a list, then watches from the list's resourceVersion; it
// re-watches from the last event when a watch ends and lists again when the server says the
// resourceVersion has expired. It reads the watch stream in its own goroutine: one goroutine a
// kind, where client-go's Reflector runs three (its loop, a resync timer that this cache never
// needs, and a stream reader handing events over a channel). Failures back off as the
// Reflector's do (0.8 s doubling to 30 s, with jitter, reset after 2 minutes without one).
//
// Why list, then watch, and not a streaming list (a watch with sendInitialEvents, one request a
// kind): a connect costs the spoke's API server less CPU this way, though it is 7 requests with
// the probe, not 4. The API server writes a streaming list's objects one watch event at a time,
// and converts each custom resource on its own (a MachineSet to PartialObjectMetadata, a Machine
// to JSON), so a connect costs it more CPU streamed than listed, and a shard's restart is
// faster listed (docs/benchmark-notes.md has the measurements). Spokes of 1.29 to 1.31 and
// 1.33 have the WatchList feature off anyway (1.32 and 1.34 on turn it on).
type kindLoop struct {
	store   *kindStore
	log     logr.Logger
	cluster string // logged with the kind at each call
	// list returns the kind's objects, as records, and the list's resourceVersion.
	list  func(ctx context.Context, o metav1.ListOptions) ([]*record, string, error)
	watch func(ctx context.Context, o metav1.ListOptions) (eventDecoder, error)
	clock clock.Clock
}

// eventDecoder reads one watch stream's events (client-go's rest/watch Decoder).
type eventDecoder interface {
	Decode() (watch.EventType, runtime.Object, error)
	Close()
}

// newKindLoop builds the list-and-watch loop that fills st through kc: Nodes listed in
// protobuf and decoded one at a time (decodeNodeList), Machines in JSON (decodeMachineList),
// MachineSets as metadata only through mc; watches streamed over hc (streamWatch).
func newKindLoop(kc *KindClient, st *kindStore, mc metadata.Interface, hc *http.Client, limiter flowcontrol.RateLimiter, codecs serializer.CodecFactory, clk clock.Clock, log logr.Logger, cluster string) (*kindLoop, error) {
	k := kc.spec
	request := func(o *metav1.ListOptions) *rest.Request {
		o.LabelSelector = k.selector
		return kc.Request(kc.rc.Get(), k.namespace).VersionedParams(o, metav1.ParameterCodec)
	}
	loop := &kindLoop{store: st, clock: clk, log: log, cluster: cluster}
	neg := runtime.NewClientNegotiator(codecs.WithoutConversion(), k.gvk.GroupVersion())
	var events func(io.ReadCloser) eventDecoder
	switch {
	case k.metadataOnly:
		r := mc.Resource(k.gvk.GroupVersion().WithResource(k.resource)).Namespace(k.namespace)
		loop.list = listItems(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = k.selector
			return r.List(ctx, o)
		})
		neg = runtime.NewClientNegotiator(metainternalversionscheme.Codecs.WithoutConversion(), metav1.SchemeGroupVersion)
	case k.gvk == GVKMachine:
		loop.list = func(ctx context.Context, o metav1.ListOptions) ([]*record, string, error) {
			res := request(&o).SetHeader("Accept", runtime.ContentTypeJSON).Do(ctx)
			if err := res.Error(); err != nil {
				return nil, "", err // with the server's Status, which Raw's error lacks
			}
			body, _ := res.Raw()
			items, rv, err := decodeMachineList(body)
			if err != nil {
				return nil, "", err
			}
			recs, err := compactAll(items)
			return recs, rv, err
		}
		events = func(body io.ReadCloser) eventDecoder { return newMachineEvents(body) }
	case k.gvk == GVKNode:
		loop.list = func(ctx context.Context, o metav1.ListOptions) ([]*record, string, error) {
			var contentType string
			res := request(&o).Do(ctx).ContentType(&contentType)
			if err := res.Error(); err != nil {
				return nil, "", err
			}
			body, _ := res.Raw()
			return decodeNodeList(body, contentType)
		}
	default:
		return nil, fmt.Errorf("no list for %s", k.gvk)
	}
	header := kc.header
	header.accept = k.accept
	var nodes *kindStore // a Node watch recognises heartbeats by the records of st
	if k.gvk == GVKNode {
		nodes = st
	}
	loop.watch = streamWatch(hc, limiter, neg, header, request, events, nodes)
	return loop, nil
}

// loopBackoff is a kind loop's wait after a failure: 0.8 s doubling to 30 s, each wait 1 to 2
// times that (jitter), back to 0.8 s once 2 minutes pass without a failure (run's
// DelayWithReset), as client-go's Reflector waits. Steps is what lets it grow: without it,
// wait.Backoff returns the first delay every time.
var loopBackoff = wait.Backoff{Duration: 800 * time.Millisecond, Factor: 2, Jitter: 1, Steps: math.MaxInt32, Cap: 30 * time.Second}

// expiryGap is how long after one expired watch another one is relisted at once; sooner, it
// waits the loop's backoff, as every other failure does.
const expiryGap = time.Minute

// errShortWatch is a watch that the server ended at once without an event: retried with
// backoff, so a server that closes every watch cannot make the loop spin.
var errShortWatch = errors.New("watch ended within a second without an event")

func (l *kindLoop) run(ctx context.Context) {
	delay := loopBackoff.DelayWithReset(l.clock, 2*time.Minute)
	rv := ""      // "" until listed, and again when the server has expired it
	listRV := "0" // the first list may come from the API server's watch cache
	var lastExpiry time.Time
	for ctx.Err() == nil {
		var err error
		if rv != "" {
			rv, err = l.watchFrom(ctx, rv)
		} else if rv, err = l.relist(ctx, listRV); rv != "" {
			// Listed: after an expired watch the next list must be at least as new as what
			// this cache saw, a quorum read, as client-go's Reflector does then.
			listRV = ""
		}
		if err == nil || ctx.Err() != nil {
			continue
		}
		// A watch whose resourceVersion expired lists again: at once, unless the last one
		// expired less than expiryGap ago, so a server that expires every watch costs a list
		// a backoff period, not a list a round trip.
		if rv != "" && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)) {
			l.log.V(4).Info("relisting", "cluster", l.cluster, "kind", l.store.spec.gvk.Kind, "reason", err.Error())
			rv = ""
			again := !lastExpiry.IsZero() && l.clock.Since(lastExpiry) < expiryGap
			lastExpiry = l.clock.Now()
			if !again {
				continue
			}
			l.log.V(2).Info("watch expired again within a minute; relisting after a backoff", "cluster", l.cluster, "kind", l.store.spec.gvk.Kind)
		} else {
			l.log.V(2).Info("list or watch failed; retrying", "cluster", l.cluster, "kind", l.store.spec.gvk.Kind, "err", err.Error())
		}
		t := l.clock.NewTimer(delay())
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
}

// relist lists the kind into the store and returns the list's resourceVersion. A list without
// one is an error, and changes nothing: the loop could not watch from it, and would list again
// at once.
func (l *kindLoop) relist(ctx context.Context, rv string) (string, error) {
	items, listRV, err := l.list(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return "", err
	}
	if listRV == "" {
		return "", fmt.Errorf("the %s list has no resourceVersion", l.store.spec.gvk.Kind)
	}
	l.store.Replace(items)
	return listRV, nil
}

// listItems adapts a list call to kindLoop.list: the list's items as records, and its
// resourceVersion.
func listItems(list func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error)) func(context.Context, metav1.ListOptions) ([]*record, string, error) {
	return func(ctx context.Context, o metav1.ListOptions) ([]*record, string, error) {
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
		recs, err := compactAll(items)
		return recs, la.GetResourceVersion(), err
	}
}

// watchOptions are a watch's options from rv: bookmarks, and a timeout picked at random between
// watchTimeoutMin and twice that.
func watchOptions(rv string) metav1.ListOptions {
	timeout := int64((watchTimeoutMin + rand.N(watchTimeoutMin)).Seconds())
	return metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout}
}

// watchFrom watches from rv, applying the events to the store until the stream ends, and
// returns the resourceVersion of the last event read (bookmarks included), rv if none.
func (l *kindLoop) watchFrom(ctx context.Context, rv string) (string, error) {
	start := l.clock.Now()
	d, err := l.watch(ctx, watchOptions(rv))
	if err != nil {
		return rv, err
	}
	defer d.Close()
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
// nil reads it as client-go does, with neg's stream decoder for the response's content type
// (a protobuf stream with protoEvents, which recognises heartbeats by the records of nodes, when
// set).
func streamWatch(hc *http.Client, limiter flowcontrol.RateLimiter, neg runtime.ClientNegotiator, header watchHeader,
	request func(o *metav1.ListOptions) *rest.Request, events func(io.ReadCloser) eventDecoder, nodes *kindStore) func(context.Context, metav1.ListOptions) (eventDecoder, error) {
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
			return &protoEvents{body: resp.Body, events: eventSerializer, objects: objects, nodes: nodes}, nil
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
//
// With nodes set (a Node watch), an update of a Node whose record nodes holds is recognised by
// its digest without being decoded (heartbeat): most of a Node watch's events are kubelets'
// heartbeats, a whole Node each, that change nothing a record keeps.
type protoEvents struct {
	body    io.ReadCloser
	events  runtime.Decoder // the metav1.WatchEvent frames
	objects runtime.Decoder // the objects they carry
	nodes   *kindStore      // the store this stream's Nodes go to; nil: every event is decoded
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
	var digest uint64
	if d.nodes != nil {
		var obj runtime.Object
		if obj, digest = d.heartbeat(frame); obj != nil {
			return watch.Modified, obj, nil
		}
	}
	var got metav1.WatchEvent
	if _, _, err := d.events.Decode(frame, nil, &got); err != nil {
		return "", nil, err
	}
	switch typ := watch.EventType(got.Type); typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Error, watch.Bookmark:
		obj, err := eventObject(d.objects, got.Object.Raw)
		if err != nil {
			return "", nil, fmt.Errorf("unable to decode watch event: %w", err)
		}
		if n, ok := obj.(*corev1.Node); ok && digest != 0 {
			return typ, &digestedNode{Node: n, digest: digest}, nil
		}
		return typ, obj, nil
	default:
		return "", nil, fmt.Errorf("got invalid watch event type: %v", got.Type)
	}
}

func (d *protoEvents) Close() { _ = d.body.Close() }

// heartbeat reads a watch event's frame without decoding it. An update of a Node whose record
// d.nodes holds from a message of the same digest (nodeDigest) has its resourceVersion stored in
// that record, and is returned as an unchangedNode. Otherwise it returns no object, and the
// digest of the event's Node if it is one (0 if not), for the record the decoding makes.
func (d *protoEvents) heartbeat(frame []byte) (runtime.Object, uint64) {
	var typ, raw []byte
	if !eachField(frame, func(f protoField) bool {
		switch f.num {
		case watchEventTypeField:
			typ = f.value
		case watchEventObjectField:
			raw = nil
			return eachField(f.value, func(r protoField) bool {
				if r.num == rawExtensionRawField {
					raw = r.value
				}
				return true
			})
		}
		return true
	}) {
		return nil, 0
	}
	msg, ok := nodeMessage(raw)
	if !ok {
		return nil, 0
	}
	name, rv, digest, ok := nodeDigest(msg)
	switch {
	case !ok:
		return nil, 0
	case string(typ) == string(watch.Modified) && d.nodes.sameDigest(name, digest, rv):
		return &unchangedNode{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}, digest
	}
	return nil, digest
}

// nodeMessage returns the Node message in raw, an object in Kubernetes' protobuf encoding (a
// runtime.Unknown behind protoMagic), without copying it, and whether raw holds a v1 Node. An
// envelope whose fields cannot be walked, or whose type or raw is not length-delimited, is not
// taken for a Node: the serializer decides what it is.
func nodeMessage(raw []byte) ([]byte, bool) {
	env, ok := bytes.CutPrefix(raw, protoMagic)
	if !ok {
		return nil, false
	}
	var apiVersion, kind, msg []byte
	if !eachField(env, func(f protoField) bool {
		switch f.num {
		case unknownTypeMetaField:
			return f.typ == protowire.BytesType && eachField(f.value, func(t protoField) bool {
				switch t.num {
				case typeMetaAPIVersionField:
					apiVersion = t.value
				case typeMetaKindField:
					kind = t.value
				}
				return true
			})
		case unknownRawField:
			msg = f.value
			return f.typ == protowire.BytesType
		}
		return true
	}) {
		return nil, false
	}
	return msg, string(apiVersion) == "v1" && string(kind) == "Node"
}

// unchangedNode is a Node watch event that protoEvents recognised as its record's (a heartbeat)
// and did not decode: its resourceVersion is already stored, and kindStore.Add takes no more.
type unchangedNode struct{ metav1.ObjectMeta }

func (*unchangedNode) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (u *unchangedNode) DeepCopyObject() runtime.Object {
	return &unchangedNode{ObjectMeta: *u.ObjectMeta.DeepCopy()}
}

// digestedNode is a Node decoded from a watch event, with its message's digest (nodeDigest),
// which its record keeps.
type digestedNode struct {
	*corev1.Node
	digest uint64
}

// eventObject decodes a protobuf watch event's object: a Node as decodeNode does (a kubelet's
// heartbeat is a whole Node each time), anything else (an error's Status) with objects.
func eventObject(objects runtime.Decoder, raw []byte) (runtime.Object, error) {
	if msg, ok := nodeMessage(raw); ok {
		return decodeNode(msg)
	}
	return runtime.Decode(objects, raw)
}

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
