package remote

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/go-logr/logr"

	"github.com/openshift/hub-node-metadata/pkg/remote/spokecache"
)

// conn is one live (or connecting) connection to a spoke: a private transport, a REST client
// per kind, a trimmed cache and the Spoke handed to callers. Only its worker goroutine uses it, except
// for spoke (callers) and the transport's observe hook.
type conn struct {
	key    connKey
	server string
	spoke  *spoke
	cache  *spokecache.Cache
	http   *http.Client // Timeout = RequestTimeout; the probe
	dials  *dialTracker

	authFailed chan struct{} // cap 1; a 401 (or 403 on a read) was seen
	suspect    chan struct{} // cap 1; a request or a watch stream failed at the transport

	mu      sync.Mutex
	lastErr error // last transport error or auth failure, for classifying a failed sync

	cancelCache context.CancelFunc
	cacheDone   chan struct{}
}

// newConn builds the connection from a prepared config, with the Manager's options, codecs
// and logger; notify is called after each change the cache sees while the Spoke is open. It
// does no I/O.
func newConn(cluster types.NamespacedName, p *prepared, opts *Options, codecs serializer.CodecFactory, log logr.Logger, notify func()) (*conn, error) {
	cn := &conn{
		key:        p.key,
		server:     p.cfg.Host,
		dials:      &dialTracker{conns: map[net.Conn]struct{}{}},
		authFailed: make(chan struct{}, 1),
		suspect:    make(chan struct{}, 1),
	}
	u, err := url.Parse(p.cfg.Host)
	if err != nil {
		return nil, newConnError(ReasonSecretInvalid, nil, "server %s is not a URL", p.cfg.Host)
	}
	cfg := rest.CopyConfig(p.cfg)
	if cfg.QPS > 0 {
		// One token bucket per spoke, shared by the kinds' REST clients, which carry the
		// cache's lists and watches and the Spoke's reads and patches (client-go would
		// otherwise give each REST client its own).
		cfg.RateLimiter = timedLimiter{flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst), opts.Metrics}
	}
	cfg.Dial = cn.dials.wrap(p.cfg.Dial)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		noHeaderTables(rt)
		return &guardTransport{
			next:    rt,
			host:    u.Host,
			prefix:  strings.TrimSuffix(u.Path, "/"),
			metrics: opts.Metrics,
			now:     opts.Clock.Now,
			observe: cn.observe,
			fence:   opts.WriteFence,
		}
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, newConnError(ReasonSecretInvalid, err, "building transport for %s", cn.server)
	}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	// Two clients over one transport: the probe's is bounded by RequestTimeout; the REST
	// clients' carry the cache's watches, which are long-running, bounded by their own timeouts
	// (spokecache's watch timeouts) and the cache ctx, and the Spoke's calls, each bounded by its ctx
	// (spoke.bound).
	cn.http = &http.Client{Transport: hc.Transport, Timeout: opts.RequestTimeout, CheckRedirect: noRedirect}
	cacheHTTP := &http.Client{Transport: hc.Transport, CheckRedirect: noRedirect}

	clients, err := spokecache.NewKindClients(cfg, cacheHTTP, codecs)
	if err != nil {
		return nil, newConnError(ReasonSecretInvalid, err, "building clients for %s", cn.server)
	}
	cc, err := spokecache.New(cfg, cacheHTTP, clients, codecs, log, cluster.String(), opts.Clock, func() {
		if cn.spoke.check() == nil {
			notify()
		}
	})
	if err != nil {
		return nil, newConnError(ReasonSecretInvalid, err, "building cache for %s", cn.server)
	}
	cn.cache = cc
	cn.spoke = &spoke{
		cluster: cluster.String(),
		server:  cn.server,
		cache:   cc,
		clients: clients,
		timeout: opts.RequestTimeout,
	}
	return cn, nil
}

// headerTableSize is the HTTP/2 header compression table (HPACK's dynamic table) of a spoke
// connection, each way: 1 byte, which holds no entry, so neither side keeps one. At the
// default 4 KiB, each table fills with the headers of the connection's few requests and their
// answers (a unique Audit-Id each time), about 6 KiB a connection in all; a connection carries
// a handful of requests an hour (watch renewals), so indexing saves nothing worth that. x/net
// reads 0 as its default, hence 1.
const headerTableSize = 1

// noHeaderTables sets headerTableSize on the *http.Transport under rt, which client-go made
// for this connection alone (its cache key holds the config's own Dial).
func noHeaderTables(rt http.RoundTripper) {
	for rt != nil {
		if t, ok := rt.(*http.Transport); ok {
			if t.HTTP2 == nil {
				t.HTTP2 = &http.HTTP2Config{}
			}
			t.HTTP2.MaxDecoderHeaderTableSize = headerTableSize
			t.HTTP2.MaxEncoderHeaderTableSize = headerTableSize
			return
		}
		w, ok := rt.(utilnet.RoundTripperWrapper)
		if !ok {
			return
		}
		rt = w.WrappedRoundTripper()
	}
}

// observe is called by the guard transport after each request that left the hub, and when a
// watch stream breaks (code 0 and the read error).
func (cn *conn) observe(method string, code int, err error) {
	auth := code == http.StatusUnauthorized ||
		// A 403 on a write may be an admission webhook's denial, not lost credentials.
		(code == http.StatusForbidden && method == http.MethodGet)
	if err == nil && !auth {
		return
	}
	canceled := errors.Is(err, context.Canceled)
	cn.mu.Lock()
	if auth {
		cn.lastErr = &httpStatusError{server: cn.server, code: code}
	} else if !canceled {
		cn.lastErr = err
	}
	cn.mu.Unlock()
	switch {
	case auth:
		signal(cn.authFailed)
	case !canceled && !errors.Is(err, context.DeadlineExceeded):
		// A caller's own deadline says nothing about the spoke; anything else failed on the
		// wire (refused, reset, the HTTP/2 health check closing a silent connection).
		signal(cn.suspect)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (cn *conn) lastError() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.lastErr
}

// probe is GET /version with the request timeout. A 429 is an answer: API
// Priority and Fairness sheds load from a live API server that way, so the
// spoke is up, and a probe that called it down would drop a healthy
// connection and its cache on a busy spoke.
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
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return &httpStatusError{server: cn.server, code: resp.StatusCode}
	}
	return nil
}

// startCache starts the cache under ctx.
func (cn *conn) startCache(ctx context.Context) {
	ctx, cn.cancelCache = context.WithCancel(ctx)
	cn.cacheDone = make(chan struct{})
	go func() {
		defer close(cn.cacheDone)
		cn.cache.Start(ctx)
	}()
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
	recordReads
}

// Read reads no further than the end of the TLS record the connection is in (recordReads).
func (t *trackedConn) Read(p []byte) (int, error) { return t.recordReads.read(t.Conn, p) }

// recordReads hands crypto/tls one TLS record at a time: a read stops at the end of the
// record's 5-byte header, then at the end of its body. crypto/tls reads a record into its
// rawInput buffer and, as a best effort to see a closing alert early, asks for as much as the
// buffer has room for; a read that brings part of the next record leaves too little room for
// the record after it, and the buffer doubles. It never shrinks. A spoke connection's lists
// arrive in full 16 KiB records, so its buffer grew past the doubling from 16 KiB that one
// record needs; read a record at a time it stops there (docs/benchmark-notes.md). The parse
// only ever shortens a read, so a byte stream that is not TLS records (a proxy's CONNECT
// answer) still reads correctly.
type recordReads struct {
	header [5]byte
	inHdr  int // bytes of the next record's header read so far
	left   int // bytes of the current record's body not yet read
}

func (r *recordReads) read(c io.Reader, p []byte) (int, error) {
	if r.left == 0 {
		if len(p) > len(r.header)-r.inHdr {
			p = p[:len(r.header)-r.inHdr]
		}
		n, err := c.Read(p)
		r.inHdr += copy(r.header[r.inHdr:], p[:n])
		if r.inHdr == len(r.header) {
			r.inHdr, r.left = 0, int(binary.BigEndian.Uint16(r.header[3:5]))
		}
		return n, err
	}
	if len(p) > r.left {
		p = p[:r.left]
	}
	n, err := c.Read(p)
	r.left -= n
	return n, err
}

func (t *trackedConn) Close() error {
	if t.once.CompareAndSwap(false, true) {
		t.d.mu.Lock()
		delete(t.d.conns, t)
		t.d.mu.Unlock()
	}
	return t.Conn.Close()
}
