// Package fleet is the hub controller: it turns ClusterDeployments and
// MachinePools into one reconcile per cluster, and reports what happened in
// a MachinePoolSync per pool, Events and metrics.
//
// # What triggers a reconcile
//
// The work item is the ClusterDeployment's namespace/name; one reconcile
// covers all of the cluster's pools. It is queued by a change of the
// ClusterDeployment that matters to the controller (generation, annotations,
// deletion, power state, condition statuses), a MachinePool's spec,
// annotations or deletion, a change of the cluster's kubeconfig Secret (a
// metadata-only watch: created, rotated, deleted), and pkg/remote's
// notifications (connected, disconnected, a Machine, MachineSet or Node
// changed in the spoke's cache). Those reach the controller's workqueue
// directly: remote.Manager.Notify is given the queue's Add from a
// source.Func, so the workqueue is the one place a notification waits, and it
// coalesces a cluster already queued (and requeues one that changes while it
// is reconciled). Each cluster is also resynced every
// ResyncPeriod (10 minutes, jittered); a resync of a cluster in sync reads
// only caches and sends nothing anywhere.
//
// # What one reconcile reads, decides and writes
//
// The reconciler reaches spokes through the Spokes interface (Ensure,
// GetSpoke, Status, Forget), which *remote.Manager implements and the
// package's tests fake. In order (syncCluster):
//
//  1. Read the ClusterDeployment and its MachinePools from the hub's cache.
//  2. Decide, a pure function shared with --dry-run and `hub-controller
//     drift`, says which pools are synced and why the others are not (cluster
//     or pool paused, ineligible, deleting, refused).
//  3. readSpoke: Ensure the connection (not for a paused or ineligible
//     cluster; Ensure disconnects an ineligible one), and, if a pool is to be
//     synced, read from the spoke's cache the synced pools' MachineSets (by
//     label), their Machines (by label) and those Machines' Nodes (by name):
//     each read builds new objects, so nothing else is built. Nothing is sent
//     to the spoke.
//  4. plan: each target's Desired: the pool's metadata, paced (below), with
//     what nodelink copied back to reclaim (nodelink.go), and whether the
//     target is held after a contest.
//  5. write: for every target of every pool, the Machine, then its Node
//     (pkg/sync's Applier: one merge patch each, only if it differs), at most
//     WritesPerCluster targets at a time (plainWriter), or, in a write
//     outage, one probe first (outageWriter, which wraps it: outage.go).
//  6. remember: denials, contests and Node writes for the next reconcile, with
//     Events when a hold starts; rollout Events.
//  7. report: each pool's counters and gauges, then its MachinePoolSync (only
//     if what it says changed), then its Events (their reasons: reasons.go).
//
// # Paced NoExecute taints
//
// Between reading the spoke and writing, Decision.Pace decides which Desired
// each target is planned with. A pool's new or changed NoExecute taints
// (pkg/sync's PacedTaints) reach at most one batch of targets at a time
// (nmsync.Pacing, from the pool's annotations); the other targets are planned
// with the taints deferred, so everything else of the pool applies to them at
// once. The Gate of a live controller is the pacer (pacing.go): it starts a
// batch when the interval after the last one has passed, remembers which
// Machines the batch took so that a failed write is finished before another
// batch starts, and, having no memory of a rollout it finds under way (a
// restart, a new leader), waits one interval first. The dry run and the drift
// report use a Gate that starts nothing. A paced pool's status is RollingOut
// until nothing waits, its waiting Nodes are not drifted, and the reconcile is
// requeued for the next batch.
//
// # Status
//
// Phases: InSync (every target holds the pool), Drifted (some do not: writes
// failed or were denied, or a dry run), RollingOut, Contested, Refused (the
// pool's spec or pacing annotations are invalid: nothing written), Paused,
// Unreachable (the cluster is ineligible, its spoke is not connected, or its
// ClusterDeployment does not exist). The cluster's state metric is paused when
// the ClusterDeployment is; a cluster whose pools are all paused is in_sync
// (nothing it should hold differs), and stays connected.
//
// A MachinePoolSync is written only when what it says changes (phase,
// counts, reason, message), so a fleet in sync writes nothing to the hub;
// freshness is the metric cluster_last_sync_timestamp_seconds. While a
// spoke's first connection attempt is in flight, its pools' statuses are
// left as they are: a restarted controller rewrites nothing that is still
// true. Refused, WriteDenied, PoolItemsIgnored and ClusterDeploymentMissing
// Events are emitted when the status changes or a write is denied, not on
// every resync; NoExecuteRolloutStarted, NoExecuteBatch and
// NoExecuteRolloutDone when a paced rollout starts, takes a batch and ends.
//
// # Retries
//
// Transient write failures (timeouts, 5xx, 429, conflicts that outlast
// pkg/sync's re-reads) requeue the cluster after RetryBase when some writes
// went through. When none did, the cluster is in a write outage (outage.go):
// each later sync writes one drifted object, in turn, every
// OutageProbeInterval, and the first write that goes through ends it and
// lets the others be written in the same sync; so the pool converges within
// an interval of the fault clearing, whatever its length, and the failing
// spoke gets one write per interval. A spoke that cannot be read (and, with
// probes turned off, a sync whose writes all failed) makes the reconcile
// return an error: the controller's rate limiter requeues the cluster after
// RetryBase, doubling to RetryCap, reset by a successful sync. Denials
// (400, 403, 422 on a PATCH) are not retried in a loop: the object is held
// for DeniedRetry, or until the pool's desired metadata changes, and the
// cluster is requeued when the hold expires. An object that keeps being
// changed back by another writer is held for ContestedWindow (contest.go).
// A MachinePoolSync status write that fails is retried on the cluster's own
// status backoff, RetryBase doubling to OutageProbeInterval, or, when the hub
// refused it (400, 403, 422), on the rate limiter's (retryStatus).
//
// # What is kept per cluster
//
// Between syncs the reconciler remembers, per cluster or per pool, what its
// writes taught it: denials and contests, paced rollouts, nodelink's
// copy-backs, write outages, the propagation clocks, the status backoff,
// what its last statuses said, the last connection reason, and the
// cluster's metric series. Each is a clusterMemory, registered once in
// init; when a ClusterDeployment is deleted or gone, forget drops its spoke
// connection and forgets it in every one (forget.go). What is kept per pool
// goes with every pool of the cluster's namespace. A test finds the
// reconciler's fields by reflection, so a memory that is not registered
// fails it.
package fleet
