package remote

import (
	"context"
	"errors"
	"fmt"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

var (
	_ manager.Runnable               = (*Manager)(nil)
	_ manager.LeaderElectionRunnable = (*Manager)(nil)
)

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
