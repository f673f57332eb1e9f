package remote

import (
	"math"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/pkg/remote/spokecache"
)

// Defaults for Options.
const (
	// UserAgent is sent with every spoke request unless Options.UserAgent
	// says otherwise.
	UserAgent             = "hub-node-metadata"
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
