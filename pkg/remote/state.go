package remote

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Status is the connection state of one cluster.
type Status struct {
	Connected bool
	Reason    Reason
	Message   string
	// Since is when Connected or Reason last changed.
	Since time.Time
}

// Manager holds one connection per spoke cluster. See the package documentation for its contract.
type Manager struct {
	secrets client.Reader
	opts    Options
	log     logr.Logger
	// Shared by every spoke connection: both are read-only once built.
	codecs serializer.CodecFactory
	// connects holds a token per connection attempt in flight.
	connects chan struct{}

	mu       sync.Mutex
	clusters map[types.NamespacedName]*entry
	notify   []func(types.NamespacedName)
	ctx      context.Context // set by Start
	stopped  bool
	wg       sync.WaitGroup
}

// entry is the state of one cluster. All fields are guarded by Manager.mu.
type entry struct {
	cluster types.NamespacedName
	label   string // namespace/name, for metrics and logs

	target *target // desired connection; nil while ineligible or the Secret is unusable
	// prepared is the config built from the last successful Secret read, for the worker's
	// next attempt; nil after the spoke rejected its credentials (the worker re-reads).
	prepared *prepared
	// secretSeen says Ensure has an answer for the Secret at secretRV (a connection, or a
	// refusal such as SecretInvalid) and for seenTarget; with Options.SecretMeta, Ensure
	// reads the Secret again only when its resourceVersion or the target changes.
	secretSeen bool
	seenTarget target
	secretRV   string
	// secretReadAt is when Ensure last read the Secret successfully.
	secretReadAt time.Time
	desiredKey   connKey // key computed by the last successful Ensure
	attemptKey   connKey // key of the worker's last attempt (== live.key while connected)
	status       Status
	live         *conn
	worker       *worker
}

func (c *Manager) entryLocked(key types.NamespacedName) *entry {
	e := c.clusters[key]
	if e == nil {
		e = &entry{cluster: key, label: key.String(), status: Status{Reason: ReasonConnecting, Since: c.opts.Clock.Now()}}
		c.clusters[key] = e
		c.opts.Metrics.setConnected(e.label, false)
	}
	return e
}

func (c *Manager) setStatusLocked(e *entry, connected bool, reason Reason, message string) {
	if e.status.Connected != connected || e.status.Reason != reason {
		e.status.Since = c.opts.Clock.Now()
	}
	e.status.Connected, e.status.Reason, e.status.Message = connected, reason, message
}

// disconnectLocked stops e's worker (its resources are released in the background), closes the
// live Spoke so holders fail fast, and records the status. It never blocks.
func (c *Manager) disconnectLocked(e *entry, reason Reason, message string, isError bool) {
	// The Spoke is closed with this reason before the worker is cancelled: a Spoke keeps the
	// first reason it is closed with, and the cancelled worker closes it too, with its own
	// ("stopping"), as soon as it sees its context done, without this lock.
	wasConnected := e.live != nil
	if e.live != nil {
		e.live.spoke.close(reason, message)
		e.live = nil // the worker owns it and closes it
	}
	if e.worker != nil {
		e.worker.cancel()
		e.worker = nil
	}
	e.attemptKey = connKey{}
	if isError && e.status.Reason != reason {
		c.opts.Metrics.connectionError(e.label, reason)
	}
	c.setStatusLocked(e, false, reason, message)
	c.opts.Metrics.setConnected(e.label, false)
	if wasConnected {
		c.log.Info("disconnected from spoke", "cluster", e.label, "reason", reason, "message", message)
		if !c.stopped { // a stopping process has nothing left to reconcile
			c.notifyLocked(e.cluster)
		}
	}
}

func (c *Manager) notifyLocked(key types.NamespacedName) {
	for _, fn := range c.notify {
		fn(key)
	}
}

func (c *Manager) notifyKey(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notifyLocked(key)
}

// worker is a cluster's background goroutine (run): it connects, monitors the connection and
// backs off, and is woken by Ensure when the wanted connection changes.
type worker struct {
	cancel context.CancelFunc
	wake   chan struct{} // cap 1
}
