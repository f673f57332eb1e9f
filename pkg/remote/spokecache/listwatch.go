package spokecache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
