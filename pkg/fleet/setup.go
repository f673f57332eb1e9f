package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	gosync "sync"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// Defaults of Options (and of the flags of `hub-controller run`).
const (
	DefaultMaxConcurrentClusters = 20
	DefaultWritesPerCluster      = 8
	// DefaultResyncPeriod is the safety-net resync. A resync of a cluster in
	// sync reads only caches: it sends nothing to the hub or the spoke.
	DefaultResyncPeriod       = 10 * time.Minute
	DefaultSyncTimeout        = 2 * time.Minute
	DefaultContestedThreshold = 5
	DefaultContestedWindow    = 10 * time.Minute
	// DefaultRetryBase and DefaultRetryCap shape the per-cluster retries after
	// transient failures: a sync whose writes partly went through is retried
	// after the base; a spoke that could not be read, 0.5 s doubling to 5 min.
	DefaultRetryBase = 500 * time.Millisecond
	DefaultRetryCap  = 5 * time.Minute
	// DefaultOutageProbeInterval spaces the probes of a cluster whose writes
	// all fail (outage.go): the pool converges within about this long after
	// the fault clears, however long it lasted, and a failing spoke gets one
	// write per interval. Kept within RetryBase..RetryCap.
	DefaultOutageProbeInterval = 2 * time.Second
	// DefaultDeniedRetry is how long an object whose patch was denied (an
	// admission webhook, a 422) is held before it is tried again.
	DefaultDeniedRetry = 5 * time.Minute
	// DefaultNodeSettle is how long a Node that was changed back right after
	// a write (nodelink copying from a Machine it has not seen updated) is
	// left for nodelink to catch up before it is written again.
	DefaultNodeSettle = 2 * time.Second
)

// Options tune the fleet controller. Zero values take the defaults.
type Options struct {
	// MaxConcurrentClusters bounds the clusters synced at once (default 20).
	MaxConcurrentClusters int
	// WritesPerCluster bounds one cluster's writes in flight (default 8).
	WritesPerCluster int
	// DryRun observes and reports drift and writes nothing to spokes.
	DryRun bool
	// ResyncPeriod is the safety-net resync of every cluster, jittered ±10%
	// (default 10m). Changes are reacted to by watches, not by this.
	ResyncPeriod time.Duration
	// SyncTimeout bounds one cluster's sync (default 2m).
	SyncTimeout time.Duration
	// ShardCount and ShardIndex split clusters across replicas: this replica
	// handles the clusters whose hash of namespace/name modulo ShardCount is
	// ShardIndex. Each shard elects its own leader (see LeaderElectionID).
	ShardCount, ShardIndex int
	// ContestedThreshold patches of one object within ContestedWindow mark it
	// contested: it is held for a window and reported (defaults 5 and 10m;
	// a negative threshold disables it).
	ContestedThreshold int
	ContestedWindow    time.Duration
	// RetryBase and RetryCap shape the backoff after transient failures
	// (defaults 500ms and 5m): a retry after writes of which some went
	// through waits RetryBase; a spoke that could not be read is retried with
	// the backoff.
	RetryBase, RetryCap time.Duration
	// OutageProbeInterval spaces the probes of a cluster in a write outage,
	// when every write of a sync failed transiently: one object is written
	// per interval until one goes through, then the rest at once (outage.go).
	// Zero means DefaultOutageProbeInterval, kept within RetryBase..RetryCap;
	// negative turns probes off: such a cluster is retried with the backoff.
	OutageProbeInterval time.Duration
	// DeniedRetry is how long a denied object is held (default 5m).
	DeniedRetry time.Duration
	// NodeSettle is how long a Node changed back right after a write is
	// left for nodelink to catch up (default 2s). Negative turns off both
	// this and the reclaim of removed items nodelink copies back.
	NodeSettle time.Duration
	// Remote configures the spoke connections.
	Remote remote.Options
	// WriteFence, if set, is asked before each reconcile and right before
	// each write to a spoke; an error skips the reconcile (retried after
	// RetryBase) or refuses the write (ErrFenced). With leader election,
	// NewManager sets it to the Lease's fence, and fences the hub's writes
	// (statuses, Events) in the manager's transport with it (fence.go).
	WriteFence func() error
	// Clock drives the reconciler's times: a sync's duration, pacing and its
	// batches, holds after a denial or a contest, the settle time, outage
	// probes and the times a status states; and, unless Remote.Clock is set,
	// the spoke connections (their probes, backoff and caches). The real clock
	// if nil. Tests may use k8s.io/utils/clock/testing.
	Clock clock.WithTickerAndDelayedExecution
}

// WithDefaults fills zero fields.
func (o Options) WithDefaults() Options {
	if o.MaxConcurrentClusters <= 0 {
		o.MaxConcurrentClusters = DefaultMaxConcurrentClusters
	}
	if o.WritesPerCluster <= 0 {
		o.WritesPerCluster = DefaultWritesPerCluster
	}
	if o.ResyncPeriod <= 0 {
		o.ResyncPeriod = DefaultResyncPeriod
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.ShardCount <= 0 {
		o.ShardCount = 1
	}
	if o.ContestedThreshold == 0 {
		o.ContestedThreshold = DefaultContestedThreshold
	}
	if o.ContestedWindow <= 0 {
		o.ContestedWindow = DefaultContestedWindow
	}
	// An unset end of the retry backoff keeps its default unless that would
	// cross the one set: a cap below the default base lowers the base to it.
	if o.RetryBase <= 0 {
		o.RetryBase = DefaultRetryBase
		if o.RetryCap > 0 {
			o.RetryBase = min(DefaultRetryBase, o.RetryCap)
		}
	}
	if o.RetryCap <= 0 {
		o.RetryCap = max(DefaultRetryCap, o.RetryBase)
	}
	if o.OutageProbeInterval == 0 {
		o.OutageProbeInterval = min(max(DefaultOutageProbeInterval, o.RetryBase), o.RetryCap)
	}
	if o.NodeSettle == 0 {
		o.NodeSettle = DefaultNodeSettle
	}
	if o.DeniedRetry <= 0 {
		o.DeniedRetry = DefaultDeniedRetry
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Remote.Clock == nil {
		o.Remote.Clock = o.Clock
	}
	return o
}

// check refuses settings that cannot work together. Only fields set (not
// zero) can conflict: WithDefaults derives the others to fit them.
func (o Options) check() error {
	if o.RetryBase > 0 && o.RetryCap > 0 && o.RetryCap < o.RetryBase {
		return fmt.Errorf("--retry-cap=%s must not be below --retry-base=%s", o.RetryCap, o.RetryBase)
	}
	if count := max(o.ShardCount, 1); o.ShardIndex < 0 || o.ShardIndex >= count {
		return fmt.Errorf("--shard-index=%d must be at least 0 and below --shard-count (%d)", o.ShardIndex, count)
	}
	return nil
}

// LeaderElectionID is the Lease name for a shard: exactly one replica per
// shard writes to that shard's clusters.
func (o Options) LeaderElectionID() string {
	o = o.WithDefaults()
	if o.ShardCount == 1 {
		return "hub-node-metadata"
	}
	return fmt.Sprintf("hub-node-metadata-shard-%d-of-%d", o.ShardIndex, o.ShardCount)
}

// InShard says whether the cluster namespace/name is in this replica's shard.
func (o Options) InShard(namespace, name string) bool {
	return Shard(namespace, name, o.ShardCount) == o.ShardIndex
}

// Shard returns the shard of a cluster among count shards: the first 8
// bytes of the SHA-256 of "namespace/name", modulo count. Every replica
// computes the same. (FNV-1a, used before, has weak low bits: with Hive's
// usual layout, a namespace named after its ClusterDeployment, every
// cluster landed on an even shard, and shard 1 of 2 had none.)
func Shard(namespace, name string, count int) int {
	if count <= 1 {
		return 0
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return int(binary.BigEndian.Uint64(sum[:8]) % uint64(count))
}

// Scheme returns the scheme the hub manager needs.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, hivev1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// CacheOptions restrict the hub cache to what the controller reads, trimmed:
// ClusterDeployments (only the fields eligibility and connection need),
// MachinePools (no status), MachinePoolSyncs, and the metadata of Secrets cut
// down to name and resourceVersion. Secret contents are never cached: the
// client reads the one Secret a ClusterDeployment names, uncached, when its
// resourceVersion changes.
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&hivev1.ClusterDeployment{}: {Transform: TrimClusterDeployment},
			&hivev1.MachinePool{}:       {Transform: trimMachinePool},
			SecretMetadata():            {Transform: trimSecretMetadata},
		},
	}
}

// SecretMetadata is the metadata-only form of a Secret the hub cache watches.
func SecretMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// trimSecretMetadata keeps what tells a Secret apart and says it changed: a
// hive hub holds many Secrets, and their labels and annotations are not ours.
func trimSecretMetadata(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp,
	}}, nil
}

// ClientOptions keep Secrets out of the cache.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
}

// keptConditions are the ClusterDeployment conditions the controller reads.
var keptConditions = map[hivev1.ClusterDeploymentConditionType]bool{
	hivev1.UnreachableCondition:          true,
	hivev1.ActiveAPIURLOverrideCondition: true,
	hivev1.ClusterHibernatingCondition:   true,
	hivev1.ClusterReadyCondition:         true,
}

// TrimClusterDeployment keeps what eligibility and connecting need, and
// drops condition timestamps so that Hive's probe-time updates do not look
// like changes.
func TrimClusterDeployment(obj any) (any, error) {
	cd, ok := obj.(*hivev1.ClusterDeployment)
	if !ok {
		return obj, nil
	}
	out := &hivev1.ClusterDeployment{TypeMeta: cd.TypeMeta, ObjectMeta: cd.ObjectMeta}
	out.ManagedFields = nil
	out.Spec.ClusterName = cd.Spec.ClusterName
	out.Spec.Installed = cd.Spec.Installed
	out.Spec.ClusterMetadata = cd.Spec.ClusterMetadata
	out.Spec.ControlPlaneConfig = cd.Spec.ControlPlaneConfig
	out.Spec.PowerState = cd.Spec.PowerState
	out.Status.PowerState = cd.Status.PowerState
	for _, c := range cd.Status.Conditions {
		if keptConditions[c.Type] {
			c.LastProbeTime = metav1Zero
			c.LastTransitionTime = metav1Zero
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	return out, nil
}

func trimMachinePool(obj any) (any, error) {
	if mp, ok := obj.(*hivev1.MachinePool); ok {
		mp.ManagedFields = nil
		mp.Status = hivev1.MachinePoolStatus{}
	}
	return obj, nil
}

// Setup wires the fleet controller into mgr: the spoke connection cache
// (which runs only on the leader), the MachinePool index, and the controller
// with its watches on ClusterDeployments, MachinePools and spoke events.
// cmd/hub-controller and the int suites call it alike.
func Setup(mgr manager.Manager, opts Options) (*Reconciler, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	if opts.Remote.Metrics == nil {
		remoteMetricsOnce.Do(func() { remoteMetrics = remote.NewMetrics(metrics.Registry) })
		opts.Remote.Metrics = remoteMetrics
	}
	if opts.Remote.Logger.GetSink() == nil {
		opts.Remote.Logger = mgr.GetLogger().WithName("remote")
	}
	// Kubeconfig Secrets: their metadata from a watch (name and resourceVersion
	// only, see CacheOptions), their content read uncached, once per change.
	opts.Remote.SecretMeta = mgr.GetCache()
	opts.Remote.WriteFence = opts.WriteFence
	spokes := remote.NewManager(mgr.GetAPIReader(), opts.Remote)
	if err := mgr.Add(spokes); err != nil {
		return nil, err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hivev1.MachinePool{}, indexPoolByCluster, poolCluster); err != nil {
		return nil, err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hivev1.ClusterDeployment{}, indexClusterBySecret, clusterSecret); err != nil {
		return nil, err
	}
	r := &Reconciler{
		Hub:      mgr.GetClient(),
		Live:     mgr.GetAPIReader(),
		Spokes:   spokes,
		Recorder: mgr.GetEventRecorder("hub-node-metadata"),
		Metrics:  NewMetrics(metrics.Registry),
		Opts:     opts,
	}
	r.init()

	inShard := opts.InShard
	cdShard := predicate.NewPredicateFuncs(func(o client.Object) bool { return inShard(o.GetNamespace(), o.GetName()) })
	poolShard := predicate.NewPredicateFuncs(func(o client.Object) bool {
		mp, ok := o.(*hivev1.MachinePool)
		return ok && inShard(mp.Namespace, mp.Spec.ClusterDeploymentRef.Name)
	})
	poolToCluster := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		mp := o.(*hivev1.MachinePool)
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: mp.Namespace, Name: mp.Spec.ClusterDeploymentRef.Name}}}
	})

	// A pool whose generation moves starts its propagation clock as its
	// event arrives, before it waits in the queue.
	poolEvents := handler.Funcs{
		CreateFunc: poolToCluster.Create,
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
				r.SawPoolChange(e.ObjectNew, r.now())
			}
			poolToCluster.Update(ctx, e, q)
		},
		DeleteFunc:  poolToCluster.Delete,
		GenericFunc: poolToCluster.Generic,
	}

	// A kubeconfig Secret that is created, rotated, fixed or deleted brings its
	// clusters back at once (Ensure then reads it only if its resourceVersion moved).
	hubCache := mgr.GetCache()
	secretToClusters := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		cds := &hivev1.ClusterDeploymentList{}
		if err := hubCache.List(ctx, cds, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexClusterBySecret: o.GetName()}); err != nil {
			mgr.GetLogger().Error(err, "list ClusterDeployments of a kubeconfig Secret", "secret", o.GetNamespace()+"/"+o.GetName())
			return nil
		}
		var out []reconcile.Request
		for i := range cds.Items {
			if inShard(cds.Items[i].Namespace, cds.Items[i].Name) {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cds.Items[i].Namespace, Name: cds.Items[i].Name}})
			}
		}
		return out
	})

	// Spoke events go straight into the controller's workqueue, which
	// coalesces a key already queued: no channel or goroutine in between.
	spokeEvents := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		spokes.Notify(func(key types.NamespacedName) { q.Add(reconcile.Request{NamespacedName: key}) })
		return nil
	})

	err := ctrl.NewControllerManagedBy(mgr).
		Named("fleet").
		For(&hivev1.ClusterDeployment{}, builder.WithPredicates(cdShard, clusterDeploymentChanged())).
		Watches(&hivev1.MachinePool{}, poolEvents, builder.WithPredicates(poolShard, poolChanged())).
		WatchesMetadata(&corev1.Secret{}, secretToClusters).
		WatchesRawSource(spokeEvents).
		// One fleet controller per manager; tests run several managers in one process.
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentClusters,
			// The backoff of a cluster whose spoke could not be read, or whose
			// writes failed with probes turned off (a reconcile that returns an
			// error): per cluster, reset by success. A write outage is probed
			// on its own interval instead (outage.go).
			RateLimiter:        workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](opts.RetryBase, opts.RetryCap),
			SkipNameValidation: ptr.To(true),
		}).
		Complete(r)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// poolCluster indexes a MachinePool by its ClusterDeployment's name.
func poolCluster(o client.Object) []string {
	return []string{o.(*hivev1.MachinePool).Spec.ClusterDeploymentRef.Name}
}

// clusterSecret indexes a ClusterDeployment by its admin kubeconfig Secret's name.
func clusterSecret(o client.Object) []string {
	if cm := o.(*hivev1.ClusterDeployment).Spec.ClusterMetadata; cm != nil && cm.AdminKubeconfigSecretRef.Name != "" {
		return []string{cm.AdminKubeconfigSecretRef.Name}
	}
	return nil
}

// clusterDeploymentChanged passes creates, deletes and updates that change
// what the controller reads (the cached object is trimmed, so any
// difference of the trimmed objects is one).
func clusterDeploymentChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*hivev1.ClusterDeployment), e.ObjectNew.(*hivev1.ClusterDeployment)
		if o == nil || n == nil {
			return true
		}
		if o.Generation != n.Generation || !maps.Equal(o.Annotations, n.Annotations) || !n.DeletionTimestamp.Equal(o.DeletionTimestamp) {
			return true
		}
		if o.Status.PowerState != n.Status.PowerState || len(o.Status.Conditions) != len(n.Status.Conditions) {
			return true
		}
		for i := range n.Status.Conditions {
			if o.Status.Conditions[i].Type != n.Status.Conditions[i].Type || o.Status.Conditions[i].Status != n.Status.Conditions[i].Status {
				return true
			}
		}
		return false
	}}
}

// poolChanged passes spec and annotation changes of MachinePools.
func poolChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			!maps.Equal(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()) ||
			!e.ObjectNew.GetDeletionTimestamp().Equal(e.ObjectOld.GetDeletionTimestamp())
	}}
}

var metav1Zero = metav1.Time{}

// The remote metrics live in controller-runtime's process-wide registry;
// several managers in one process (tests) share them.
var (
	remoteMetricsOnce gosync.Once
	remoteMetrics     *remote.Metrics
)
