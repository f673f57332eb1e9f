package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

func (c *Manager) startWorkerLocked(e *entry) {
	if c.ctx == nil || c.stopped {
		return // Start launches it
	}
	ctx, cancel := context.WithCancel(c.ctx)
	w := &worker{cancel: cancel, wake: make(chan struct{}, 1)}
	e.worker = w
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		c.run(ctx, e, w)
	}()
}

// current reports whether w is still e's worker and e is still registered.
func (c *Manager) currentLocked(e *entry, w *worker) bool {
	return e.worker == w && c.clusters[e.cluster] == e
}

// result says why a connected spoke was dropped.
type result struct {
	reason  Reason
	message string
	isError bool // counts in connection_errors_total
	// immediate reconnects without backoff (settings changed, or credentials rejected on a
	// connection that had been healthy).
	immediate bool
	stable    bool // at least one periodic probe succeeded
}

// run is the per-cluster worker: connect, monitor, disconnect, back off, repeat.
func (c *Manager) run(ctx context.Context, e *entry, w *worker) {
	// Fields are passed at each call, not bound with WithValues: a bound zap logger keeps an
	// encoder and a buffer of its own, about a KiB per logger, for every spoke.
	bo := c.opts.newBackoff()
	for {
		c.mu.Lock()
		if !c.currentLocked(e, w) || e.target == nil {
			c.mu.Unlock()
			return
		}
		t, p := *e.target, e.prepared
		c.mu.Unlock()

		select {
		case c.connects <- struct{}{}:
		case <-ctx.Done():
			return
		}
		cn, p, err := c.connect(ctx, t, p)
		<-c.connects
		var key connKey
		if p != nil {
			key = p.key
		}
		if ctx.Err() != nil {
			if cn != nil {
				cn.close()
			}
			return
		}
		var wait time.Duration
		if err != nil {
			reason := classify(err)
			c.log.V(1).Info("cannot connect to spoke", "cluster", e.label, "reason", reason, "error", err.Error())
			c.mu.Lock()
			if !c.currentLocked(e, w) {
				c.mu.Unlock()
				return
			}
			e.attemptKey = key
			if reason == ReasonUnauthorized {
				e.prepared = nil // re-read the Secret before the next attempt
			} else if p != nil && e.target != nil && *e.target == t {
				e.prepared = p
			}
			c.opts.Metrics.connectionError(e.label, reason)
			changed := e.status.Reason != reason
			c.setStatusLocked(e, false, reason, err.Error())
			if changed {
				// The controller learns why the spoke is not connected (a failed
				// attempt is a state change even though it never connected).
				c.notifyLocked(e.cluster)
			}
			c.mu.Unlock()
			wait = bo.Step()
		} else {
			c.mu.Lock()
			if !c.currentLocked(e, w) {
				c.mu.Unlock()
				cn.spoke.close(ReasonNotEnsured, "superseded")
				cn.close()
				return
			}
			e.attemptKey, e.live = key, cn
			if e.target != nil && *e.target == t {
				e.prepared = p
			}
			c.setStatusLocked(e, true, ReasonConnected, "connected to "+cn.server)
			c.opts.Metrics.setConnected(e.label, true)
			c.notifyLocked(e.cluster)
			c.mu.Unlock()
			c.log.Info("connected to spoke", "cluster", e.label, "server", cn.server)

			res := c.monitor(ctx, e, w, cn)
			cn.spoke.close(res.reason, res.message)
			c.mu.Lock()
			if c.currentLocked(e, w) && e.live == cn {
				e.live = nil
				if res.reason == ReasonUnauthorized {
					e.prepared = nil // rotation: the next attempt re-reads the Secret
				}
				if res.isError {
					c.opts.Metrics.connectionError(e.label, res.reason)
				}
				c.setStatusLocked(e, false, res.reason, res.message)
				c.opts.Metrics.setConnected(e.label, false)
				c.notifyLocked(e.cluster)
				c.log.Info("disconnected from spoke", "cluster", e.label, "reason", res.reason, "message", res.message)
			}
			c.mu.Unlock()
			cn.close()
			if ctx.Err() != nil {
				return
			}
			if res.stable {
				bo = c.opts.newBackoff()
			}
			if !res.immediate {
				wait = bo.Step()
			}
		}
		if wait > 0 && !c.sleep(ctx, e, w, wait) {
			return
		}
	}
}

// sleep waits d, or less if Ensure reports new connection settings. False means stop.
func (c *Manager) sleep(ctx context.Context, e *entry, w *worker, d time.Duration) bool {
	t := c.opts.Clock.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
			return true
		case <-w.wake:
			c.mu.Lock()
			changed := e.desiredKey != e.attemptKey
			c.mu.Unlock()
			if changed {
				return true
			}
		}
	}
}

// connect makes one attempt: read the Secret unless p (from Ensure, or the last attempt) is
// given, build, probe the spoke and start the cache once the probe has a connection, and wait
// for both, all within ConnectTimeout. It returns the prepared config it used (nil if the
// Secret read failed). On error nothing is left running.
func (c *Manager) connect(ctx context.Context, t target, p *prepared) (*conn, *prepared, error) {
	connectCtx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	if p == nil {
		var err error
		if p, err = prepare(connectCtx, c.secrets, t, &c.opts); err != nil {
			return nil, nil, err
		}
	}
	cn, err := newConn(t.cluster, p, &c.opts, c.codecs, c.log, func() { c.notifyKey(t.cluster) })
	if err != nil {
		return nil, p, err
	}
	fail := func(err error) (*conn, *prepared, error) {
		cn.spoke.close(classify(err), err.Error())
		cn.close()
		return nil, p, err
	}
	// The probe goes first and the lists follow as soon as it has a connection, not an answer:
	// they share its HTTP/2 connection (requests started together would each dial and
	// handshake, and all but one connection would be dropped), and a spoke that answers is
	// synced without waiting a round trip for the probe. One that does not fails the probe
	// within RequestTimeout, well before ConnectTimeout (the lists would only retry).
	syncCtx, cancelSync := context.WithCancel(connectCtx)
	defer cancelSync()
	probed := make(chan error, 1)
	gotConn := make(chan struct{})
	go func() {
		probeCtx, cancelProbe := context.WithTimeout(syncCtx, c.opts.RequestTimeout)
		defer cancelProbe()
		var once sync.Once
		probeCtx = httptrace.WithClientTrace(probeCtx, &httptrace.ClientTrace{
			GotConn: func(httptrace.GotConnInfo) { once.Do(func() { close(gotConn) }) },
		})
		err := cn.probe(probeCtx)
		if err != nil {
			cancelSync() // the spoke does not answer: stop waiting for its lists
		}
		probed <- err
	}()
	select {
	case <-gotConn:
		cn.startCache(ctx)
	case err := <-probed:
		probed <- err // read again below
		if err == nil {
			cn.startCache(ctx)
		}
	}
	// Abort the sync as soon as the spoke rejects our credentials.
	go func() {
		select {
		case <-cn.authFailed:
			cancelSync()
		case <-syncCtx.Done():
		}
	}()
	ok := cn.cache.WaitForCacheSync(syncCtx)
	probeErr := <-probed
	if probeErr != nil && !errors.Is(probeErr, context.Canceled) {
		return fail(fmt.Errorf("probing %s: %w", cn.server, probeErr))
	}
	if !ok {
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		if last := cn.lastError(); last != nil {
			return fail(fmt.Errorf("syncing cache of %s: %w", cn.server, last))
		}
		return fail(newConnError(ReasonTimeout, nil, "cache of %s did not sync within %s", cn.server, c.opts.ConnectTimeout))
	}
	return cn, p, nil
}

// monitor watches the connected spoke until it must be dropped, and says why. It sends
// nothing while the spoke is healthy: the transport's HTTP/2 health check closes a connection
// that stops answering, which fails its watches; a request or watch that fails at the
// transport makes the spoke suspect, and only then is it probed (GET /version, ProbeTimeout).
// ProbeFailureThreshold consecutive failed probes, ProbeInterval apart, disconnect it.
func (c *Manager) monitor(ctx context.Context, e *entry, w *worker, cn *conn) result {
	connectedAt := c.opts.Clock.Now()
	stable := func() bool { return c.opts.Clock.Since(connectedAt) >= c.opts.ProbeInterval }
	authResult := func() result {
		s := stable()
		return result{
			reason:    ReasonUnauthorized,
			message:   fmt.Sprintf("%s rejected the credentials; reconnecting with a fresh read of the Secret", cn.server),
			isError:   true,
			immediate: s,
			stable:    s,
		}
	}
	failures := 0
	var next clock.Timer // the next probe while suspect
	defer func() {
		if next != nil {
			next.Stop()
		}
	}()
	probe := func() (result, bool) {
		probeCtx, cancel := context.WithTimeout(ctx, c.opts.ProbeTimeout)
		err := cn.probe(probeCtx)
		cancel()
		if ctx.Err() != nil {
			return result{}, false
		}
		if err == nil {
			if failures > 0 {
				c.log.V(1).Info("spoke answers again", "cluster", e.label)
			}
			failures = 0
			return result{}, false
		}
		reason := classify(err)
		if reason == ReasonUnauthorized {
			return authResult(), true
		}
		failures++
		c.log.V(1).Info("spoke probe failed", "cluster", e.label, "failures", failures, "reason", reason, "error", err.Error())
		if failures >= c.opts.ProbeFailureThreshold {
			return result{
				reason:  reason,
				message: fmt.Sprintf("%s stopped answering: %d probe(s) failed after a transport failure, last: %v", cn.server, failures, err),
				isError: true,
				stable:  stable(),
			}, true
		}
		next = c.opts.Clock.NewTimer(c.opts.ProbeInterval)
		return result{}, false
	}
	for {
		var nextC <-chan time.Time
		if next != nil {
			nextC = next.C()
		}
		select {
		case <-ctx.Done():
			return result{reason: ReasonConnecting, message: "stopping"}
		case <-cn.authFailed:
			return authResult()
		case <-w.wake:
			c.mu.Lock()
			changed := e.desiredKey != cn.key
			c.mu.Unlock()
			if changed {
				return result{reason: ReasonConnecting, message: "connection settings changed; reconnecting", immediate: true, stable: stable()}
			}
		case <-cn.suspect:
			if next != nil {
				continue // a probe is already scheduled
			}
			if res, done := probe(); done {
				return res
			}
		case <-nextC:
			next = nil
			if res, done := probe(); done {
				return res
			}
		}
	}
}
