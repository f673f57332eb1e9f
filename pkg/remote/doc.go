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
// Each spoke costs one transport (one HTTP/2 connection), one REST client per kind and one cache: a
// list-and-watch loop per kind (Nodes; Machines and MachineSets in openshift-machine-api) feeding a
// compact store. A loop lists its kind and then watches it from the list's resourceVersion, so a
// connect sends a spoke seven requests (the probe, a list and a watch a kind). A streaming list
// (a watch with sendInitialEvents) would take four, but costs the spoke's API server more CPU: it
// writes and converts the objects one watch event at a time (kindLoop says by how much). A Node
// list is decoded one Node at a time, each compacted before the next (decodeNodeList): every
// connect in flight lists at once, and a real Node is tens of KiB decoded. The kinds' REST
// clients serve the cache's loops and the Spoke's live reads and patches alike, and the store
// holds records only; a patch's answer is
// checked, not decoded, and asks for the object's metadata only. A protobuf watch (Nodes,
// MachineSets) reads each event into a buffer borrowed from a pool every spoke shares, not into one
// per watch grown to the largest event (a real Node with its images is tens of KiB). A watch
// request carries the user agent and bearer token itself, so client-go's transport wrappers pass it
// on instead of keeping a clone of it for the life of the watch. crypto/tls is handed one TLS
// record per read, so its record buffer holds one record (32 KiB after doubling), not the 45 KiB it
// grew to when reads brought parts of the next. A loop reads its watch stream itself, so a spoke
// runs 8 goroutines: the 3 loops, the HTTP/2 stream writer of each of their watches, the
// connection's reader and the connection's monitor (client-go's Reflector would add a resync timer
// and a stream reader per kind). Only what sync.Targets can map to a pool is listed: MachineSets
// labelled hive.openshift.io/machine-pool and Machines labelled
// machine.openshift.io/cluster-api-machineset. Nodes come in protobuf; Machines in JSON (a custom
// resource), decoded straight into the fields a record keeps (machineJSON: the decoder skips
// providerSpec, providerStatus and managedFields without building them); MachineSets as metadata
// only (PartialObjectMetadata, in protobuf: the planner reads their name, uid and labels). Each
// object is kept as a record of the fields the planner reads (name, uid and providerID packed into
// one string, resourceVersion as a number when it is one, labels, this controller's and nodelink's
// annotations, deletionTimestamp, taints; for a Machine also its owners, spec.metadata.labels,
// nodeRef's name and phase), with each label an 8-byte handle to an interned key=value pair, since
// most pairs repeat across a fleet; the pairs that are one object's own (its hostname label,
// nodelink's annotation) are packed into one string instead, as interning them would cost more.
// Reads return new objects built from the records, so cached objects are incomplete: compute
// patches, never Update from them. An update keeps the fields it did not change in the old record's
// memory, and one that changes nothing in the record but a numeric resourceVersion (a Node
// heartbeat, a re-list) stores that version in the record it has, makes no record and is not
// notified. A Node's status is decoded for its conditions only, and a Node update whose bytes a
// record reads are those its record was made from (nodeDigest: a kubelet's heartbeat, at least
// every 5 minutes a Node) is recognised without being decoded. The codecs are shared by every
// connection.
//
// # Layout
//
// A file a concern, as Cluster API splits its clustercache:
//
//   - manager.go: the Manager's API (Ensure, GetSpoke, Status, Forget, Notify, Start);
//     worker.go: the worker of each cluster (connect, monitor, backoff);
//   - conn.go: a connection and its transport; allowlist.go: the requests it lets through;
//     kubeconfig.go and eligible.go: what a ClusterDeployment and its Secret allow;
//   - client.go: a REST client per kind, which the cache lists and watches through and the
//     Spoke reads live and patches through; spoke.go: the Spoke callers hold;
//   - cache.go: a spoke's cache and its reads; store.go: one kind's records;
//     listwatch.go: the list-and-watch loop that fills a store, with its decoders
//     (nodelist.go, machinejson.go);
//   - compact.go and record.go: what a record keeps and how;
//   - reason.go and metrics.go: what the Manager reports; dial.go: a one-shot reader for
//     command-line tools.
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
