// Package remote turns a Hive ClusterDeployment into a safe, cheap, always-available handle on
// its spoke cluster. It is modelled on Cluster API's ClusterCache.
//
// # Usage
//
// A Manager runs as a manager.Runnable on the elected leader only. The fleet controller calls
// Ensure on every reconcile of a ClusterDeployment, GetSpoke to get a Spoke, Forget when the
// ClusterDeployment is gone, and hands Notify its workqueue's Add (source.Func), so that spoke
// events become reconcile requests with no queue in between. It never requeues to wait for a connection: a connect or disconnect is a
// notification.
//
// # Connect
//
// Ensure first decides eligibility from the ClusterDeployment alone (Eligible: deleting, fake,
// relocating, paused, not installed, no metadata, hibernating, or not reachable according to
// Hive's Unreachable condition). For an eligible cluster it reads one Secret from the hub
// (spec.clusterMetadata.adminKubeconfigSecretRef, key "kubeconfig") with an uncached reader, so
// Secret contents are never cached, and validates the kubeconfig. With Options.SecretMeta (the
// fleet controller's metadata-only Secret watch, trimmed to name and resourceVersion), the
// Secret is read only when its resourceVersion or the ClusterDeployment's connection settings
// changed since the last read, whatever that read concluded; a Secret the watch does not hold
// is SecretMissing without a request. The watch also brings the cluster back the moment its
// Secret is created, rotated, fixed or deleted. Ensure refuses exec and
// auth-provider users (ExecRefused), insecure-skip-tls-verify and non-https servers
// (InsecureRefused), and any reference to files or a proxy (SecretInvalid): a Secret must not
// be able to make the hub run programs, read its own files or skip TLS verification.
// spec.controlPlaneConfig.apiURLOverride is used only while the ActiveAPIURLOverride condition
// is True; apiServerIPOverride makes the transport dial that IP (bypassing any proxy) while the
// URL host stays the TLS server name and Host header.
//
// The connection key is (Secret name, Secret resourceVersion, API URL in use, IP override).
// When Ensure computes a key different from the live connection's, a background worker
// reconnects (break-before-make: the old connection is dropped before the new one is built).
// Ensure, GetSpoke, Status and Forget never touch the network and return at once.
//
// A worker per cluster connects in the background (at most MaxConcurrentConnects attempts in
// flight across the fleet, so a hub restart does not list thousands of spokes at once): build a
// private transport from the config Ensure prepared (the Secret is read again only after the
// spoke rejected the credentials), probe GET /version (RequestTimeout), start a trimmed cache
// and wait for it to sync, all within ConnectTimeout. Only then is the cluster Connected and a
// notification sent.
// Failures are classified into Reasons (x509 -> TLSError, dial -> Unreachable, deadlines ->
// Timeout, 401/403 -> Unauthorized) and retried with exponential backoff (BackoffBase doubling
// to BackoffCap, plus up to 20% jitter so thousands of spokes do not retry in lockstep).
//
// # Health and rotation
//
// A connected spoke in good health costs nothing but its watches (and their renewals, every
// 5 to 10 minutes per kind): it is never polled. Liveness comes from the transport: client-go's
// HTTP/2 health check sends a PING after 30 s without a frame and closes the connection if
// the answer takes more than 15 s, which breaks every watch on it. A request or a watch
// stream that fails at the transport (refused, reset, closed by the health check; not a
// caller's own deadline or cancellation) makes the spoke suspect, and only then is it probed:
// GET /version within ProbeTimeout (5 s). ProbeFailureThreshold consecutive failed probes
// (default 1, ProbeInterval apart) disconnect it, so a killed spoke is reported within about a
// second and a black-holed or frozen one within about 50 s. A 401 seen on any request, or a
// 403 on a read or the probe, drops the connection at once and reconnects re-reading the
// Secret (credential rotation) without waiting for the threshold; the reconnect is immediate
// if the connection had been up for at least ProbeInterval, otherwise it backs off, so a spoke
// that keeps rejecting us cannot make us re-list it in a loop. A 403 on a PATCH does not
// count: admission webhooks deny with 403, and treating a denied patch as lost credentials
// would re-list the whole spoke per denial. Backoff resets once a connection has been up for
// ProbeInterval.
//
// A Spoke obtained before a disconnect fails every later call with ErrNotConnected; callers get
// a fresh one from GetSpoke after the next connect notification.
//
// # Least authority
//
// Authority is limited by construction, in the transport, whatever the kubeconfig's user may
// do: an allow-list RoundTripper lets through only GET /version, get/list/watch of Nodes and of
// Machines and MachineSets in openshift-machine-api, and PATCH of one Machine or one Node, to
// the configured host only (redirects are not followed). Everything else fails with
// ErrRequestNotAllowed before it leaves the hub and is counted in requests_refused_total. No
// discovery is made: a static RESTMapper knows the three kinds. The Spoke exposes no Create,
// Update or Delete.
//
// # Memory
//
// Each spoke costs one transport (one HTTP/2 connection), one REST client per kind and one cache
// (package spokecache, whose doc says where its memory goes).
//
// # Layout
//
// A file a concern, as Cluster API splits its clustercache; the spoke's cache is package
// spokecache (its records, store, list-and-watch loop, codecs and kind clients), which this
// package builds per connection and never reaches into. Bottom up; a file uses only files
// above it in this list (go run ./hack/filegraph shows it):
//
//   - reason.go, spoke.go, metrics.go: what the Manager reports, and the Spoke callers hold
//     (over spokecache's cache and kind clients);
//   - options.go: the Manager's options and their defaults;
//   - eligible.go and kubeconfig.go: what a ClusterDeployment and its Secret allow;
//   - allowlist.go: the requests a connection lets through; conn.go: a connection and its
//     transport;
//   - state.go: the Manager's state (a cluster's entry, its worker, its status) and what runs
//     under its lock; worker.go: the worker of each cluster (connect, monitor, backoff);
//   - manager.go: the Manager's API (Ensure, GetSpoke, Status, Forget, Notify, Start);
//   - dial.go: a one-shot reader for command-line tools.
//
// # Notifications
//
// Notify's function receives cluster keys, with the Manager's lock held; it must not block. The
// fleet controller's workqueue receives them directly and is the only place they wait: it
// coalesces a key that is already queued and never drops one, so a key says "look again", never
// "this happened". See Notify.
//
// # Secrets
//
// Kubeconfig contents, tokens, keys and certificates are never logged nor put in errors,
// statuses or metrics. Messages name the Secret (namespace/name) and the server URL only;
// kubeconfig parse errors are not wrapped because YAML errors may quote values.
//
// # Trade-offs
//
// Break-before-make on rotation leaves a cluster briefly disconnected. A watch per kind per
// spoke includes a full watch of its Nodes (compacted), which is what makes drift visible at once;
// the price is hub memory proportional to fleet Nodes. Metrics of requests have no cluster
// label, to bound cardinality; per-cluster health is in connected and connection_errors_total.
package remote
