// Package spokecache is one spoke's trimmed cache and the REST clients it reads through: a
// list-and-watch loop per kind (Nodes; Machines and MachineSets in openshift-machine-api) feeding
// a store of compact records, and the kind clients that also serve the Spoke's live reads and
// patches. Package remote builds one per connection (New, NewKindClients), starts it, and hands
// its reads to callers; nothing here knows of connections, health or credentials.
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
// # Heartbeats
//
// Most of a Node watch's events are kubelets' heartbeats, a whole Node each, that change
// nothing a record keeps. The Node codec's stream says what an event holds before decoding it
// (nodeEvents.Peek: its type, the Node's name and resourceVersion, and nodeDigest, a hash of
// the bytes a record is made from); the loop asks the store whether its record was made from
// that digest (kindStore.Refresh), which then takes the new resourceVersion, and the event is
// dropped undecoded. On a miss the event is decoded and its record keeps the digest.
//
// # Layout
//
// Bottom up; a file uses only files above it in this list (go run ./hack/filegraph shows it):
//
//   - fields.go, taints.go, kinds.go: packed fields, interned taint lists, the kinds' specs,
//     the scheme of their types;
//   - record.go and store.go: what a record keeps, and one kind's records (with Refresh);
//   - buffers.go, protoevents.go, proto.go: the pooled event buffers, the protobuf watch
//     reader, the protobuf walker and field numbers;
//   - header.go, compact.go, client.go: a watch's header, making records, a REST client per
//     kind (which the Spoke's live reads and patches go through too);
//   - codec.go: what a kind's codec is; nodes.go, machinesets.go, machines.go: one codec a
//     kind, with its decoders: how it is listed, how its watch is read, what a record keeps;
//   - listwatch.go: the one list-and-watch loop, which runs any codec;
//   - cache.go: the kinds' table, a spoke's cache and its reads.
package spokecache
