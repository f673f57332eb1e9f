package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// conn is one live (or connecting) connection to a spoke: a private transport, a live client,
// a trimmed cache and the Spoke handed to callers. Only its worker goroutine uses it, except
// for spoke (callers) and the transport's observe hook.
type conn struct {
	key    connKey
	server string
	spoke  *spoke
	cache  ctrlcache.Cache
	http   *http.Client // Timeout = RequestTimeout; live client and probe
	dials  *dialTracker

	authFailed chan struct{} // cap 1; a 401 (or 403 on a read) was seen
	cacheErr   chan error    // cap 1; cache.Start returned before we stopped it

	mu      sync.Mutex
	lastErr error // last transport error or auth failure, for classifying a failed sync

	cancelCache context.CancelFunc
	cacheDone   chan struct{}
}

// newConn builds the connection from a prepared config. It does no I/O.
func (c *Cache) newConn(cluster types.NamespacedName, p *prepared) (*conn, error) {
	cn := &conn{
		key:        p.key,
		server:     p.cfg.Host,
		dials:      &dialTracker{conns: map[net.Conn]struct{}{}},
		authFailed: make(chan struct{}, 1),
		cacheErr:   make(chan error, 1),
	}
	u, err := url.Parse(p.cfg.Host)
	if err != nil {
		return nil, newConnError(ReasonSecretInvalid, nil, "server %s is not a URL", p.cfg.Host)
	}
	cfg := rest.CopyConfig(p.cfg)
	cfg.Dial = cn.dials.wrap(p.cfg.Dial)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return &guardTransport{
			next:    rt,
			host:    u.Host,
			prefix:  strings.TrimSuffix(u.Path, "/"),
			metrics: c.opts.Metrics,
			now:     c.opts.Clock.Now,
			observe: cn.observe,
		}
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, newConnError(ReasonSecretInvalid, err, "building transport for %s", cn.server)
	}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	// Two clients over one transport: requests are bounded by RequestTimeout; the cache's
	// watches are long-running, bounded by the reflector's own timeouts and by the cache ctx.
	cn.http = &http.Client{Transport: hc.Transport, Timeout: c.opts.RequestTimeout, CheckRedirect: noRedirect}
	cacheHTTP := &http.Client{Transport: hc.Transport, CheckRedirect: noRedirect}

	mapper := NewRESTMapper()
	live, err := client.New(cfg, client.Options{HTTPClient: cn.http, Scheme: c.opts.Scheme, Mapper: mapper})
	if err != nil {
		return nil, newConnError(ReasonSecretInvalid, err, "building client for %s", cn.server)
	}
	cacheCfg := rest.CopyConfig(cfg)
	cacheCfg.Timeout = 0
	machineAPI := map[string]ctrlcache.Config{MachineAPINamespace: {}}
	cc, err := ctrlcache.New(cacheCfg, ctrlcache.Options{
		HTTPClient:                  cacheHTTP,
		Scheme:                      c.opts.Scheme,
		Mapper:                      mapper,
		ReaderFailOnMissingInformer: true,
		DefaultNamespaces:           machineAPI,
		DefaultTransform:            trimObject,
		ByObject: map[client.Object]ctrlcache.ByObject{
			&corev1.Node{}:               {},
			&machinev1beta1.Machine{}:    {Namespaces: machineAPI},
			&machinev1beta1.MachineSet{}: {Namespaces: machineAPI},
		},
	})
	if err != nil {
		return nil, newConnError(ReasonSecretInvalid, err, "building cache for %s", cn.server)
	}
	cn.cache = cc
	cn.spoke = &spoke{
		cluster: cluster.String(),
		server:  cn.server,
		cached:  cc,
		live:    live,
		scheme:  c.opts.Scheme,
		timeout: c.opts.RequestTimeout,
	}
	return cn, nil
}

// observe is called by the guard transport after each request that left the hub.
func (cn *conn) observe(method string, code int, err error) {
	auth := code == http.StatusUnauthorized ||
		// A 403 on a write may be an admission webhook's denial, not lost credentials.
		(code == http.StatusForbidden && method == http.MethodGet)
	if err == nil && !auth {
		return
	}
	cn.mu.Lock()
	if auth {
		cn.lastErr = &httpStatusError{server: cn.server, code: code}
	} else if !errors.Is(err, context.Canceled) {
		cn.lastErr = err
	}
	cn.mu.Unlock()
	if auth {
		select {
		case cn.authFailed <- struct{}{}:
		default:
		}
	}
}

func (cn *conn) lastError() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.lastErr
}

// probe is GET /version with the request timeout.
func (cn *conn) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cn.server+"/version", nil)
	if err != nil {
		return err
	}
	resp, err := cn.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return &httpStatusError{server: cn.server, code: resp.StatusCode}
	}
	return nil
}

// startCache registers the event handlers and starts the cache under ctx.
func (cn *conn) startCache(ctx context.Context, notify func()) error {
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) {
			if cn.spoke.check() == nil {
				notify()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if cn.spoke.check() == nil && changed(oldObj, newObj) {
				notify()
			}
		},
		DeleteFunc: func(any) {
			if cn.spoke.check() == nil {
				notify()
			}
		},
	}
	for _, obj := range []client.Object{&corev1.Node{}, &machinev1beta1.Machine{}, &machinev1beta1.MachineSet{}} {
		inf, err := cn.cache.GetInformer(ctx, obj, ctrlcache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("event handler for %T: %w", obj, err)
		}
	}
	ctx, cn.cancelCache = context.WithCancel(ctx)
	cn.cacheDone = make(chan struct{})
	go func() {
		defer close(cn.cacheDone)
		if err := cn.cache.Start(ctx); err != nil {
			cn.cacheErr <- err
		}
	}()
	return nil
}

// close stops the cache, waits for it, and closes every TCP connection the transport made.
// Callers must already have closed the spoke (so callers see ErrNotConnected).
func (cn *conn) close() {
	if cn.cancelCache != nil {
		cn.cancelCache()
		<-cn.cacheDone
	}
	cn.http.CloseIdleConnections()
	cn.dials.closeAll()
}

// changed filters out updates that make no difference to the trimmed object (Node status
// heartbeats only bump resourceVersion once status is dropped). Resyncs (same
// resourceVersion) pass, so periodic resync still reaches subscribers.
func changed(oldObj, newObj any) bool {
	o, ok1 := oldObj.(client.Object)
	n, ok2 := newObj.(client.Object)
	if !ok1 || !ok2 || o.GetResourceVersion() == n.GetResourceVersion() {
		return true
	}
	oc, nc := o.DeepCopyObject().(client.Object), n.DeepCopyObject().(client.Object)
	oc.SetResourceVersion("")
	nc.SetResourceVersion("")
	return !equality.Semantic.DeepEqual(oc, nc)
}

// dialTracker remembers every TCP connection of one spoke connection so teardown can close
// them all (HTTP/2 connections with a just-cancelled watch are not "idle" yet and would
// otherwise linger with their reader goroutines until the idle timeout).
type dialTracker struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

type dialFunc = func(ctx context.Context, network, address string) (net.Conn, error)

func (d *dialTracker) wrap(next dialFunc) dialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := next(ctx, network, address)
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.closed {
			_ = c.Close()
			return nil, errors.New("connection closed by hub")
		}
		tc := &trackedConn{Conn: c, d: d}
		d.conns[tc] = struct{}{}
		return tc, nil
	}
}

func (d *dialTracker) closeAll() {
	d.mu.Lock()
	d.closed = true
	conns := d.conns
	d.conns = map[net.Conn]struct{}{}
	d.mu.Unlock()
	for c := range conns {
		_ = c.(*trackedConn).Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	d    *dialTracker
	once atomic.Bool
}

func (t *trackedConn) Close() error {
	if t.once.CompareAndSwap(false, true) {
		t.d.mu.Lock()
		delete(t.d.conns, t)
		t.d.mu.Unlock()
	}
	return t.Conn.Close()
}
