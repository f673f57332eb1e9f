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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
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
//
// The loop knows no kind: its codec (nodes.go, machines.go, machinesets.go) lists the kind,
// reads its watch streams and makes its records.
type kindLoop struct {
	store   *kindStore
	codec   codec
	log     logr.Logger
	cluster string // logged with the kind at each call
	watch   func(ctx context.Context, o metav1.ListOptions) (eventDecoder, error)
	clock   clock.Clock
}

// newKindLoop builds the list-and-watch loop that fills st through kc with c; watches are
// streamed over hc (streamWatch).
func newKindLoop(kc *KindClient, st *kindStore, c codec, hc *http.Client, limiter flowcontrol.RateLimiter, clk clock.Clock, log logr.Logger, cluster string) *kindLoop {
	header := kc.header
	header.accept = kc.spec.accept
	return &kindLoop{store: st, codec: c, clock: clk, log: log, cluster: cluster,
		watch: streamWatch(hc, limiter, c.negotiator(), header, kc.listRequest, c.events)}
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
	items, listRV, err := l.codec.list(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return "", err
	}
	if listRV == "" {
		return "", fmt.Errorf("the %s list has no resourceVersion", l.store.spec.gvk.Kind)
	}
	l.store.Replace(items)
	return listRV, nil
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
		next, _, err := l.apply(d)
		switch {
		case errors.Is(err, io.EOF):
			if events == 0 && l.clock.Since(start) < time.Second {
				return rv, errShortWatch
			}
			return rv, nil
		case err != nil:
			return rv, err
		}
		rv = next
	}
}

// apply reads d's next event, applies it to the store and returns its resourceVersion
// (a bookmark's too). An update that the store recognises by its head (peeker, Refresh: a
// kubelet's heartbeat) is not decoded, and recognised says so.
func (l *kindLoop) apply(d eventDecoder) (rv string, recognised bool, err error) {
	var head eventHead
	if p, ok := d.(peeker); ok {
		if head, err = p.Peek(); err != nil {
			return "", false, err
		}
		if head.typ == watch.Modified && head.digest != 0 && l.store.Refresh(head.name, head.digest, head.rv) {
			p.Skip()
			return head.rv, true, nil
		}
	}
	typ, obj, err := d.Decode()
	if err != nil {
		return "", false, err
	}
	m, err := meta.Accessor(obj)
	if err != nil && typ != watch.Error {
		return "", false, err
	}
	switch typ {
	case watch.Added, watch.Modified:
		r, err := l.codec.compact(obj)
		if err != nil {
			return "", false, err
		}
		r.digest = head.digest // not published yet: the store's lock is not needed
		l.store.Add(r)
	case watch.Deleted:
		l.store.Delete(m.GetName())
	case watch.Bookmark:
	case watch.Error:
		return "", false, apierrors.FromObject(obj)
	default:
		return "", false, fmt.Errorf("unexpected watch event %q", typ)
	}
	return m.GetResourceVersion(), false, nil
}

// streamWatch opens watches with hc, to be read in the caller's goroutine. request builds each
// one's URL (path and parameters), limiter is waited on as for any request, header is sent
// with each, neg decodes a failed response's Status, and events reads the stream.
func streamWatch(hc *http.Client, limiter flowcontrol.RateLimiter, neg runtime.ClientNegotiator, header watchHeader,
	request func(o *metav1.ListOptions) *rest.Request, events func(io.ReadCloser, string, map[string]string) (eventDecoder, error)) func(context.Context, metav1.ListOptions) (eventDecoder, error) {
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
		return events(resp.Body, mediaType, params)
	}
}
