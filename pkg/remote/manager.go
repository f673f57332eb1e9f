package remote

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/go-logr/logr"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/openshift/hub-node-metadata/pkg/remote/spokecache"
)

// Defaults for Options.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultConnectTimeout = 30 * time.Second
	// A connected spoke is probed only when a request or a watch failed at the
	// transport (see doc.go, Health). DefaultProbeTimeout bounds that probe;
	// one failed probe after such a failure disconnects by default, so a dead
	// spoke is reported within client-go's HTTP/2 health check (30 s without a
	// frame, then a PING answered within 15 s) plus the probe: about 50 s.
	DefaultProbeTimeout          = 5 * time.Second
	DefaultProbeInterval         = 10 * time.Second
	DefaultProbeFailureThreshold = 1
	DefaultBackoffBase           = time.Second
	DefaultBackoffCap            = 5 * time.Minute
	// DefaultQPS and DefaultBurst match kubelet's defaults (kube-api-qps 50, burst 100): a
	// pool change on a 100-Node pool (200 writes) is then bounded by the API server, not by
	// a 20 QPS limiter (8 s).
	DefaultQPS   = 50
	DefaultBurst = 100
	// DefaultMaxConcurrentConnects bounds connection attempts in flight (see Options).
	DefaultMaxConcurrentConnects = 64
	// backoffJitter is the jitter factor: a wait is d..d*(1+backoffJitter).
	backoffJitter = 0.2
)

// Options configure a Manager. Zero values take the defaults above.
type Options struct {
	// WriteFence, if set, is asked right before each request that is not a
	// read leaves for a spoke; an error refuses it (the request is not sent).
	// The fleet sets it to its Lease's fence, so a leader that lost its
	// Lease while frozen writes nothing when it wakes.
	WriteFence func() error
	// QPS and Burst limit each spoke client (not the fleet).
	QPS   float32
	Burst int
	// RequestTimeout bounds every spoke request (a Spoke's patches and live reads; its reads of
	// the cache send none).
	RequestTimeout time.Duration
	// ConnectTimeout bounds one connection attempt: Secret read, probe and cache sync.
	ConnectTimeout time.Duration
	// ProbeTimeout bounds one health probe (GET /version). A connected spoke is probed only
	// after one of its requests or watches failed at the transport.
	ProbeTimeout time.Duration
	// ProbeInterval spaces the probes of a spoke under suspicion when ProbeFailureThreshold
	// is above 1, and is how long a connection must stay up to count as stable (a stable
	// connection resets the backoff, and reconnects at once after a 401).
	ProbeInterval time.Duration
	// ProbeFailureThreshold consecutive failed probes disconnect the spoke (default 1: the
	// transport already saw a failure, the probe confirms it).
	ProbeFailureThreshold int
	// BackoffBase and BackoffCap shape the reconnect backoff: exponential (factor 2) from Base,
	// capped at Cap, each wait stretched by up to 20% random jitter.
	BackoffBase, BackoffCap time.Duration
	// Scheme must know core/v1 and machine.openshift.io/v1beta1; spokecache.NewScheme() if nil.
	Scheme *runtime.Scheme
	// Metrics is optional.
	Metrics *Metrics
	// Logger defaults to a discarding logger.
	Logger logr.Logger
	// UserAgent is sent with every spoke request (default UserAgent). The
	// binary sets it to name the replica, so spoke audit logs tell replicas apart.
	UserAgent string
	// MaxConcurrentConnects bounds connection attempts (Secret read, probe, first list of
	// every kind) in flight across the fleet. A hub starting with thousands of clusters
	// otherwise lists them all at once: a burst of Secret reads on the hub, of lists on the
	// spokes, and of decoding garbage in the hub's memory. Default 64.
	MaxConcurrentConnects int
	// SecretMeta, when set, serves the metadata of kubeconfig Secrets
	// (metav1.PartialObjectMetadata of kind Secret) from a watch-backed cache: Ensure then
	// reads a Secret's content only when its resourceVersion differs from the one it last
	// read, and a Secret the cache does not hold is SecretMissing without a hub request.
	// The fleet controller passes its manager's cache, whose metadata-only Secret watch
	// also enqueues the cluster.
	SecretMeta client.Reader
	// SecretRecheckInterval applies only without SecretMeta (the one-shot drift report,
	// tests): how long Ensure trusts a healthy connection without reading its kubeconfig
	// Secret again (default 1m). A 401 from the spoke re-reads it at once.
	SecretRecheckInterval time.Duration
	// Clock drives probes, backoff, Status.Since, the caches' list-and-watch loops and the
	// packing of their records; the real clock if nil. Tests may use
	// k8s.io/utils/clock/testing.
	Clock clock.WithTickerAndDelayedExecution
}

func (o Options) withDefaults() Options {
	if o.MaxConcurrentConnects <= 0 {
		o.MaxConcurrentConnects = DefaultMaxConcurrentConnects
	}
	if o.QPS == 0 {
		o.QPS = DefaultQPS
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.ProbeFailureThreshold <= 0 {
		o.ProbeFailureThreshold = DefaultProbeFailureThreshold
	}
	if o.BackoffBase <= 0 {
		// Unset, the first wait is the default unless the cap set is shorter:
		// a default does not raise a cap that was set.
		o.BackoffBase = DefaultBackoffBase
		if o.BackoffCap > 0 {
			o.BackoffBase = min(DefaultBackoffBase, o.BackoffCap)
		}
	}
	if o.BackoffCap <= 0 {
		o.BackoffCap = DefaultBackoffCap
	}
	if o.BackoffCap < o.BackoffBase {
		o.BackoffCap = o.BackoffBase
	}
	if o.Scheme == nil {
		o.Scheme = spokecache.NewScheme()
	}
	if o.UserAgent == "" {
		o.UserAgent = UserAgent
	}
	if o.SecretRecheckInterval <= 0 {
		o.SecretRecheckInterval = time.Minute
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

func (o *Options) newBackoff() wait.Backoff {
	return wait.Backoff{Duration: o.BackoffBase, Factor: 2, Jitter: backoffJitter, Steps: math.MaxInt32, Cap: o.BackoffCap}
}

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

var (
	_ manager.Runnable               = (*Manager)(nil)
	_ manager.LeaderElectionRunnable = (*Manager)(nil)
)

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

// NewManager returns a Manager. secrets must be an uncached reader: only the kubeconfig Secret named
// by each ClusterDeployment is ever read, with Get, so the hub never caches Secrets wholesale.
func NewManager(secrets client.Reader, opts Options) *Manager {
	opts = opts.withDefaults()
	return &Manager{
		secrets:  secrets,
		opts:     opts,
		log:      opts.Logger.WithName("remote"),
		codecs:   serializer.NewCodecFactory(opts.Scheme),
		connects: make(chan struct{}, opts.MaxConcurrentConnects),
		clusters: map[types.NamespacedName]*entry{},
	}
}

// NeedLeaderElection is false: Start runs in every replica, and connects only the clusters
// someone Ensures. The fleet controller, which writes, runs only in the elected replica; a
// standby Ensures its clusters only while the leader's Lease runs out (fleet's standbyWarmer),
// and connecting writes nothing.
func (c *Manager) NeedLeaderElection() bool { return false }

// Ensure registers or refreshes the desired connection for cd and returns the current Status.
// It reads the kubeconfig Secret from the hub but never talks to the spoke: connecting,
// reconnecting and health checking happen in the background. An ineligible cd is disconnected.
// Calling it on every reconcile is cheap; it reconnects only when the connection key (Secret
// name and resourceVersion, API URL in use, IP override) changes.
func (c *Manager) Ensure(ctx context.Context, cd *hivev1.ClusterDeployment) Status {
	if cd == nil {
		return Status{Reason: ReasonNoClusterMetadata, Message: "no ClusterDeployment"}
	}
	key := types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}
	if ok, reason, msg := Eligible(cd); !ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		e := c.entryLocked(key)
		e.target, e.prepared, e.secretSeen = nil, nil, false
		c.disconnectLocked(e, reason, msg, false)
		return e.status
	}
	t := targetFor(cd)

	secretRV, metaOK := "", false
	if c.opts.SecretMeta != nil {
		rv, found, err := c.secretVersion(ctx, t.secret)
		switch {
		case err != nil:
			c.log.V(1).Info("cannot read kubeconfig Secret metadata from the cache; reading the Secret", "cluster", key.String(), "error", err.Error())
		case !found:
			// The watch-backed cache is the hub's word: no request needed to know it is gone.
			c.mu.Lock()
			defer c.mu.Unlock()
			e := c.entryLocked(key)
			e.target, e.prepared, e.secretRV = nil, nil, ""
			e.secretSeen = true
			c.disconnectLocked(e, ReasonSecretMissing, fmt.Sprintf("kubeconfig Secret %s not found", t.secret), true)
			return e.status
		default:
			secretRV, metaOK = rv, true
		}
	}

	c.mu.Lock()
	if e := c.clusters[key]; e != nil && e.secretSeen && e.seenTarget == t {
		// Nothing the connection depends on changed since the Secret was last read: the same
		// content gives the same answer, whether a connection or a refusal. Ensure runs on
		// every reconcile; this keeps the hub's Secret reads to one per change.
		unchanged := metaOK && e.secretRV == secretRV
		// Without metadata, a healthy connection is trusted for SecretRecheckInterval; a
		// rotated credential shows up at once as a 401 anyway.
		trusted := !metaOK && e.live != nil && e.target != nil && c.opts.Clock.Since(e.secretReadAt) < c.opts.SecretRecheckInterval
		if unchanged || trusted {
			st := e.status
			c.mu.Unlock()
			return st
		}
	}
	c.mu.Unlock()

	p, err := prepare(ctx, c.secrets, t, &c.opts)

	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entryLocked(key)
	if err != nil {
		reason := classify(err)
		if reason == ReasonHubReadFailed {
			// A hub hiccup says nothing about the spoke: keep whatever we have.
			c.log.Error(err, "cannot read kubeconfig Secret; keeping the current connection state", "cluster", e.label)
			if !e.status.Connected && e.worker == nil {
				c.setStatusLocked(e, false, reason, err.Error())
			}
			return e.status
		}
		e.target, e.prepared = nil, nil
		e.secretSeen, e.seenTarget, e.secretRV = metaOK, t, secretRV
		c.disconnectLocked(e, reason, err.Error(), true)
		return e.status
	}
	e.secretReadAt = c.opts.Clock.Now()
	e.secretSeen, e.seenTarget, e.secretRV = true, t, p.key.ResourceVersion
	e.target, e.prepared = &t, p
	e.desiredKey = p.key
	switch {
	case e.worker == nil:
		c.setStatusLocked(e, false, ReasonConnecting, "connecting to "+p.key.Server)
		c.startWorkerLocked(e)
	case e.attemptKey != p.key:
		select {
		case e.worker.wake <- struct{}{}:
		default:
		}
	}
	return e.status
}

// secretVersion returns the resourceVersion of a Secret from Options.SecretMeta.
func (c *Manager) secretVersion(ctx context.Context, key types.NamespacedName) (rv string, found bool, err error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := c.opts.SecretMeta.Get(ctx, key, m); err != nil {
		if apierrors.IsNotFound(err) {
			return "", false, nil
		}
		return "", false, err
	}
	return m.ResourceVersion, true, nil
}

// GetSpoke returns the connected Spoke, or at once an error wrapping ErrNotConnected with the
// Reason (see ReasonOf). It never blocks on the network.
func (c *Manager) GetSpoke(cluster types.NamespacedName) (Spoke, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.clusters[cluster]
	if e == nil {
		return nil, &notConnectedError{cluster: cluster.String(), reason: ReasonNotEnsured}
	}
	if e.live == nil {
		return nil, &notConnectedError{cluster: e.label, reason: e.status.Reason, message: e.status.Message}
	}
	return e.live.spoke, nil
}

// Status returns the cluster's connection state without blocking.
func (c *Manager) Status(cluster types.NamespacedName) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.clusters[cluster]; e != nil {
		return e.status
	}
	return Status{Reason: ReasonNotEnsured}
}

// Forget tears the cluster's connection down (in the background) and forgets it, including its
// metric series. Use it when the ClusterDeployment is deleted.
func (c *Manager) Forget(cluster types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.clusters[cluster]
	if e == nil {
		return
	}
	c.disconnectLocked(e, ReasonNotEnsured, "forgotten", false)
	delete(c.clusters, cluster)
	c.opts.Metrics.forget(e.label)
}

// Notify registers fn, called with a cluster's key when it connects, disconnects, and when a
// Machine, MachineSet or Node in its cache is added, deleted or meaningfully updated. A key says
// only "look at this cluster again": read Status or GetSpoke for the current state.
//
// fn is called with the Manager's lock held, from connection workers and cache event handlers,
// so it must return at once and must not call the Manager: a workqueue's Add is the intended fn.
// The workqueue is then the only place notifications wait, and it coalesces them: a key queued
// once stays queued once, and a key added while it is being reconciled is reconciled again
// after. Register before the first Ensure to miss nothing (the fleet controller registers from
// its source.Func when it starts, before any reconcile).
func (c *Manager) Notify(fn func(types.NamespacedName)) {
	c.mu.Lock()
	c.notify = append(c.notify, fn)
	c.mu.Unlock()
}

// Start runs the background connection workers until ctx is done, then tears every connection
// down and returns. It implements manager.Runnable.
func (c *Manager) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.ctx != nil {
		c.mu.Unlock()
		return errors.New("remote cache already started")
	}
	c.ctx = ctx
	for _, e := range c.clusters {
		if e.target != nil && e.worker == nil {
			c.startWorkerLocked(e)
		}
	}
	c.mu.Unlock()

	<-ctx.Done()

	c.mu.Lock()
	c.stopped = true
	for _, e := range c.clusters {
		c.disconnectLocked(e, ReasonConnecting, "hub controller stopping", false)
	}
	c.mu.Unlock()
	c.wg.Wait()
	return nil
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
