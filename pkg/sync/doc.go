// Package sync decides and applies the labels and taints one Hive MachinePool
// declares on the existing Machines and Nodes of one spoke cluster.
//
// It has a pure core and an applier. DesiredFromPool validates a pool,
// Targets maps the pool to its Machines and their Nodes, and PlanMachine and
// PlanNode compute, for one observed object, the minimal change and the JSON
// merge patch that makes it. None of them takes a client, a clock or a
// logger, and none modifies its inputs. Applier sends the patches.
//
// # What it promises
//
// After a successful write, the object holds every declared item with the
// pool's value, exactly once: Node labels (pool spec.labels) on the Node and
// in the Machine's spec.metadata.labels, Machine labels (spec.machineLabels)
// in the Machine's metadata.labels, and taints (spec.taints, identified by
// key+effect, first value winning) in the spec.taints of both. A declared key
// that holds another component's value is overwritten, as Hive's API promises
// ("overwrite any modifications"), and reported as an Override.
//
// Nothing that is neither declared nor owned is removed or changed: other
// components' labels and taints (cordon, not-ready, the autoscaler's,
// medik8s.io/drain, GPU operators', kubelet's, MCO's, users') stay, and
// foreign taints keep their place, their TimeAdded and their duplicates.
//
// # Paced NoExecute taints
//
// A NoExecute taint evicts at once every pod that does not tolerate it, so
// adding one, or changing its value, is the one write this package lets the
// caller pace (pace.go). PacingFromAnnotations reads a pool's batch and
// interval; ProgressOf says, from a target's Machine and Node alone, whether
// it holds the pool's NoExecute taints (Done), holds them on one side only
// (Started: some taint on one side only, an interrupted batch), lacks one on
// both sides (Pending), or has no Node yet (Exempt: nothing runs there).
// Admit chooses the Pending targets of a new batch, and none while a batch is
// Started. PacedDesired holds back, on every target a batch did not take, the
// paced taints its Machine and Node both lack: the planner neither adds nor
// changes them, keeps an observed copy as it is and its ownership as
// recorded, and plans the rest of the pool as usual. Removals are never
// deferred. FuzzPacedRollout checks that one round never gives a NoExecute
// taint that neither side held to more targets than the batch. When to start
// a batch is the caller's (it needs a clock).
//
// # Living beside nodelink
//
// machine-api's nodelink controller copies each Machine's
// spec.metadata.labels onto its Node (overwriting values) and its
// spec.taints (adding a key+effect the Node lacks), from its own cache. The
// Machine is written before its Node so that nodelink never copies back an
// old item. But nodelink may act on a Machine it has not seen updated yet,
// and write back onto the Node what was just removed or replaced there.
// Three ways were weighed: removing from the Node only once nodelink must
// have seen the Machine (slower removals, and a wait that no lag bound makes
// safe), tombstones in the Node's annotations (a write per removal just for
// bookkeeping), and the Node's managedFields (nodelink's copies of the
// controller's own items are also its writes). The choice: Desired.Reclaim.
// The caller (pkg/fleet) remembers, per Node, the items it removed and the
// values it replaced, for two minutes. An item that comes back with the very
// value removed, neither declared nor owned, while the Machine does not hold
// it (Reclaim.Except), is removed again (OpReclaim; a reclaim does not extend
// the two minutes);
// a value set back to the one replaced is an ordinary Update. Either is
// written only once NodeSettle (2 s) has passed since the Node's last write
// (Applier.Settle), so nodelink has caught up, usually fixes a label itself,
// and the two never fight: a change costs at most one extra write. Limits:
// the memory is in-process, so a copy-back that races a restart stays, as
// foreign; and someone who sets, within two minutes, the very key=value the
// controller just removed sees it removed again.
//
// # Ownership bookkeeping
//
// Each object records what this package applied to it, in annotations:
// AnnotationOwnedLabels, AnnotationOwnedTaints and, on Machines,
// AnnotationOwnedMachineLabels. After a write the record is exactly the
// declared items, so an item the pool stops declaring is removed on the next
// pass only if it is recorded (and, for a label, not shared: below), or if
// the template delivered it and the pool dropped it before it was recorded
// (dropped.go); an item present with the wanted value but not recorded is
// adopted (recorded, not written). Every write names FieldManager, so that the spoke's
// managedFields tell this controller's writes from everyone else's.
//
// # Shared items
//
// A recorded item may also have been put there by someone else: kubelet
// registers every OpenShift worker with node-role.kubernetes.io/worker, and
// an admin may have labelled a Node by hand with the value a pool declares
// later. Such an item is shared, and stays when the pool stops declaring it;
// removing a role label is an outage, while a leaked label can be removed by
// hand. What the pool delivered still leaves: what this controller wrote,
// and what reached a new Machine from the MachineSet template Hive wrote and
// its Node through nodelink.
//
// The evidence is the object's metadata.managedFields, which the API server
// keeps key by key for labels: a request's field manager becomes the owner
// of the keys it changed, and a key written again with the same value keeps
// its owner (kubelet keeps its role label when nodelink or this controller
// copies the same value). An owned label the pool no longer declares is
// removed only if every manager that owns its key is a delivery path of the
// pool:
//
//   - this controller (FieldManager);
//   - on a Machine, the manager that created it from its MachineSet's
//     template: the owner of its controller ownerReference;
//   - on a Node, the manager that owns nodelink's machine.openshift.io/machine
//     annotation (nodelink, which links the Node and copies the Machine's
//     labels), and only while the Machine no longer holds the label
//     (Desired.MachineNodeLabels), since nodelink copies back whatever the
//     Machine holds.
//
// Any other owner (kubelet, kubectl-label, an operator, a GitOps tool that
// applies the same value), or no owner at all (an object older than
// managedFields), makes it shared: the plan leaves it in place, drops it
// from the record and reports it (OpRelease, with the other managers in
// Change.With). The rule is applied when the item is about to be removed,
// not when it is adopted, so records written by earlier versions, which
// adopted whatever they found, are judged by it too, and nothing is removed
// because of how it was recorded. A trimmed cache drops managedFields, so a
// plan with such a removal asks for the object whole (Plan.NeedsRead), and
// the Applier reads it once before writing: a pool change that drops labels
// costs one read and one write per object; other changes cost no read.
//
// Limits. The linker and the creator are recognized by the fields they own,
// not by name, so a nodelink or MachineSet controller under another
// identity is still recognized; but one whose managedFields were reset
// since it linked (an annotation written again by someone else) makes
// nodelink's later copies look foreign, and they stay (a leak, the safe
// side). Node and Machine spec.taints are one atomic field in managedFields:
// one manager owns the whole list, so no evidence names who added one
// taint, and taints keep the record's rule: an adopted taint is removed when
// the pool stops declaring it. A pool that declares a taint someone else
// also sets should give it a key of its own. Entries are sorted and joined
// by commas without spaces; taints are written key:Effect. An empty record
// removes the annotation. Parsing is tolerant: an entry that does not parse,
// or names a reserved key, is ignored and never treated as owned, so a
// damaged annotation cannot make us delete someone else's metadata.
//
// # Reserved keys
//
// DesiredFromPool refuses, in labels, machine labels and taints, keys whose
// prefix is one of these domains or a subdomain of one:
//
//	kubernetes.io, k8s.io                 Kubernetes (kubelet, node controllers, well-known labels)
//	machine.openshift.io                  machine API (generated, selector and actuator labels)
//	machineconfiguration.openshift.io     Machine Config Operator
//	hub-node-metadata.openshift.io        this controller's bookkeeping
//
// except the keys of Kubernetes' domain that are the cluster admin's:
// node-role.kubernetes.io/<role> for any role but master and control-plane
// (infra pools set node-role.kubernetes.io/infra as a label and a taint), the
// node-restriction.kubernetes.io domain and its subdomains (which the
// NodeRestriction admission plugin keeps kubelets from setting), and the
// label, not taint key, node.kubernetes.io/exclude-from-external-load-balancers.
// It also refuses the unprefixed cluster-autoscaler taint keys
// ToBeDeletedByClusterAutoscaler and DeletionCandidateOfClusterAutoscaler.
// A pool with any invalid item is refused whole with a *ValidationError that
// lists every problem. Two kinds of items only warn: duplicate taints, and
// the machine labels Hive ignores (HiveIgnoredMachineLabels), which are left
// out of Desired, values unchecked, while the rest of the pool is synced.
//
// # Warnings
//
// DesiredFromPool returns its warnings, also with an error, for the caller to
// surface (a Warning Event on the MachinePool and the status message). They
// come in this order, ignored machine labels sorted by key, and read:
//
//	spec.machineLabels["<key>"]: ignored, as Hive ignores it: it conflicts with a label machine-api generates
//	spec.machineLabels["machineconfiguration.openshift.io/osstream"]: ignored, as Hive ignores it: it conflicts with a label the installer generates when its OSStreams feature gate is on
//	spec.taints[<i>]: duplicate of spec.taints[<j>] (<key>:<Effect>); the first value "<v>" wins over "<w>"
//
// # Agreement with Hive, item by item
//
// Each rule was checked against what Hive does with the same input, read in
// the public source (no code copied) of openshift/hive at c02e51732cbc
// (August 2026) and openshift/machine-api-operator at 951196122fe4:
//
//   - openshift/hive apis/hive/v1/machinepool_types.go: the MachinePoolSpec
//     docs (labels, machineLabels "We ignore entries that conflict with
//     generated labels", taints collapsed by key+effect, first value kept).
//   - openshift/hive pkg/controller/machinepool/machinepool_controller.go:
//     generateMachineSets (spec.labels into spec.template.spec.metadata.labels,
//     taints through GetUniqueTaints, machineLabels into
//     spec.template.metadata.labels unless the generated template has the key),
//     syncMachineSets (merge into the remote MachineSet, removal of what
//     status.owned* lists) and updateOwnedLabelsAndTaints.
//   - openshift/hive pkg/controller/utils/taints.go: GetUniqueTaints.
//   - openshift/hive pkg/validating-webhooks/hive/v1/machinepool_validating_admission_hook.go:
//     validateMachinePoolSpecInvariants checks spec.labels' syntax only;
//     machineLabels and taints are not checked.
//   - openshift/hive vendor/github.com/openshift/installer/pkg/asset/machines/<platform>/machinesets.go
//     and vendor/github.com/openshift/installer/pkg/utils/utils.go
//     (SetMachineSetOSStreamLabels): the generated template's labels.
//   - openshift/machine-api-operator pkg/controller/nodelink/nodelink_controller.go:
//     Reconcile copies the Machine's spec.metadata labels onto its Node and
//     appends the taints whose key+effect the Node lacks, in one Node Update.
//   - openshift/machine-api-operator pkg/webhooks/vap.go, pkg/operator/sync.go,
//     install/0000_30_machine-api-operator_13_machinehealthcheck.yaml, and
//     openshift/machine-api-provider-aws pkg/actuators/machine/reconciler.go
//     (setMachineCloudProviderSpecifics): who sets and reads machine-api's
//     own labels.
//
// Where Hive delivers an item to new Machines or Nodes and we refuse it, the
// reason is that writing it on existing objects is unsafe.
//
//	input                                | what Hive does                             | what we do                   | why
//	-------------------------------------|--------------------------------------------|------------------------------|-------------------------------------------
//	spec.labels, bad key or value        | webhook refuses it (ValidateLabels); a     | refuse the pool              | same outcome: it can reach no Node (and
//	                                     |   pool it never saw puts it in the         |                              |   would block nodelink's copy of the rest)
//	                                     |   template, and nodelink's Node Update     |                              |
//	                                     |   then fails whole                         |                              |
//	kubernetes.io, k8s.io keys (labels,  | webhook accepts; in the template, so on    | refuse the pool              | unsafe: kubelet, the cloud node manager,
//	  machine labels, taints), but for   |   new Machines; nodelink copies labels     |                              |   node controllers and NFD own keys there
//	  the exceptions below               |   onto new Nodes and appends missing       |                              |   (hostname, os, arch, instance-type,
//	                                     |   taints                                   |                              |   topology, feature.node...) that
//	                                     |                                            |                              |   scheduling relies on; declaring one
//	                                     |                                            |                              |   means overwriting theirs and removing it
//	                                     |                                            |                              |   when the pool drops it
//	node-role.kubernetes.io/<role>, role | delivered as above                         | apply                        | admins' roles (infra pools set infra)
//	  not master or control-plane        |                                            |                              |
//	node-role.kubernetes.io/master,      | delivered as above                         | refuse the pool              | unsafe: makes a worker look like (or be
//	  /control-plane                     |                                            |                              |   scheduled as) the control plane
//	node-restriction.kubernetes.io and   | delivered as above                         | apply                        | the admins' domain: the NodeRestriction
//	  its subdomains (labels, machine    |                                            |                              |   admission plugin keeps kubelets from
//	  labels, taints)                    |                                            |                              |   setting these labels; no component sets
//	                                     |                                            |                              |   them
//	label node.kubernetes.io/exclude-    | delivered as above                         | apply; as a taint key,       | a well-known label only admins set (the
//	  from-external-load-balancers       |                                            |   refuse                     |   service controller reads it);
//	                                     |                                            |                              |   node.kubernetes.io taints are the node
//	                                     |                                            |                              |   controllers'
//	spec.labels, machine.openshift.io    | delivered as above (Hive ignores only      | refuse the pool              | unsafe: machine-api's domain; its
//	  keys (the four cluster-api-* ones  |   machine labels)                          |                              |   actuators put interruptible-instance in
//	  too)                               |                                            |                              |   spot Machines' spec.metadata.labels, and
//	                                     |                                            |                              |   the termination handler runs on the
//	                                     |                                            |                              |   Nodes that carry it
//	machineconfiguration.openshift.io    | delivered as above                         | refuse the pool              | unsafe: MCO's own keys (pool membership,
//	  keys (but osstream as a machine    |                                            |                              |   config state)
//	  label, below)                      |                                            |                              |
//	hub-node-metadata.openshift.io keys  | delivered as above                         | refuse the pool              | unsafe: would forge our ownership records
//	hive.openshift.io keys               | delivered as above                         | apply                        | nothing reads them on Machines or Nodes
//	spec.machineLabels, the four         | skipped, any value: the generated template | drop with a warning, value   | same answer: existing Machines get what
//	  generated cluster-api-* keys       |   has them ("conflict with generated label |   unchecked; sync the rest   |   new ones get
//	  (cluster, machineset,              |   -- ignoring"); not in                    |   (status message,           |
//	  machine-role, machine-type)        |   status.ownedMachineLabels                |   PoolItemsIgnored Event)    |
//	spec.machineLabels,                  | skipped like those when the installer Hive | drop with a warning, as      | same answer as current Hive; never written
//	  machineconfiguration.openshift.io/ |   vendors generates it (OSStreams feature  |   above                      |   either way (MCO's key)
//	  osstream                           |   gate, on by default since its July 2026  |                              |
//	                                     |   installer); older Hive put it in the     |                              |
//	                                     |   template                                 |                              |
//	spec.machineLabels, other            | put in the template: new Machines get it;  | refuse the pool              | unsafe: actuators set these on every
//	  machine.openshift.io keys          |   actuators then overwrite region, zone,   |                              |   Machine update (we would fight them),
//	                                     |   instance-type and interruptible-instance |                              |   machine-api's failure-domain admission
//	                                     |   on their next update                     |                              |   policy trusts region and zone, and its
//	                                     |                                            |                              |   termination-handler MachineHealthCheck
//	                                     |                                            |                              |   selects Machines by
//	                                     |                                            |                              |   interruptible-instance; refused, not
//	                                     |                                            |                              |   dropped: Hive delivers them, so dropping
//	                                     |                                            |                              |   one would let us report InSync while
//	                                     |                                            |                              |   existing Machines differ from new ones
//	spec.machineLabels, bad key or value | no check; in the template, so the API      | refuse the pool              | same outcome: it can reach no Machine
//	                                     |   server refuses every Machine the         |                              |
//	                                     |   MachineSet creates                       |                              |
//	spec.taints, duplicates by           | collapsed, first value wins                | collapse, first value wins,  | same answer
//	  key+effect                         |   (GetUniqueTaints); order not kept        |   pool order kept, warning   |
//	spec.taints, bad effect, key or      | no check (neither CRD nor webhook); in the | refuse the pool              | same outcome: it never reaches a Node (and
//	  value                              |   template, but nodelink's Node Update     |                              |   would block nodelink's copy of the rest)
//	                                     |   that carries it is refused whole         |                              |
//	spec.taints, node.kubernetes.io/*    | delivered to new Nodes by nodelink         | refuse the pool              | unsafe: the node lifecycle controller and
//	  (out-of-service too) and other     |                                            |                              |   kubelet own them (not-ready,
//	  reserved keys                      |                                            |                              |   unreachable, unschedulable);
//	                                     |                                            |                              |   out-of-service on a running Node
//	                                     |                                            |                              |   force-deletes its pods and detaches its
//	                                     |                                            |                              |   volumes; declaring one means removing it
//	                                     |                                            |                              |   when the pool drops it
//	spec.taints, the autoscaler's        | delivered as above                         | refuse the pool              | unsafe: the cluster autoscaler owns them
//	  unprefixed keys                    |                                            |                              |
//	spec.taints[].timeAdded              | copied into the template; nodelink appends | ignored: a taint is key,     | a pool's time is no fact about an existing
//	                                     |   the taint with it                        |   value, effect; an existing |   Node
//	                                     |                                            |   taint keeps its own        |
//	more than 100 labels, 100 machine    | no limit                                   | refuse the pool              | unsafe past some size: our owned-* records
//	  labels or 50 taints                |                                            |                              |   are annotations, and an object's
//	                                     |                                            |                              |   annotations share one 256 KiB limit with
//	                                     |                                            |                              |   MCO's and nodelink's; at these limits
//	                                     |                                            |                              |   the records take at most about 80 KB
//	a taint's value changes              | template updated; nodelink never updates a | update it on Machines and    | Hive's API promises the pool wins
//	                                     |   Node taint's value                       |   Nodes                      |
//	an item the pool drops               | removed from the template (status.owned*); | removed where our record     | nothing foreign is removed
//	                                     |   nodelink never removes from Nodes        |   says we applied it and,    |
//	                                     |                                            |   for a label, no one else   |
//	                                     |                                            |   set it (managedFields)     |
//
// # Write semantics
//
// A plan's patch is a JSON merge patch (RFC 7386) that carries the observed
// metadata.resourceVersion, so the API server rejects it with 409 Conflict if
// the object changed since it was read; it sets or nulls single label keys
// and owned-* annotations, and replaces spec.taints whole when the list
// changes (a Node's taint list is atomic). Applier sends each patch as one
// Patch request; on a conflict it re-reads the object through an uncached
// Reader, re-plans and retries, a bounded number of times. The Machine is
// written before its Node, and the Node is not written if the Machine write
// did not succeed: the machine-api nodelink controller copies the Machine's
// spec.metadata.labels and missing taints onto the Node, so a removal done
// on the Node alone would come back.
//
// # Crash safety
//
// Every write is a single request that changes the items and their record
// together, under optimistic concurrency, so there is no state in which an
// item was applied but not recorded by a write of ours, or the reverse. A
// crash between the Machine write and the Node write leaves the Node to the
// next pass, which plans from what it then observes; items nodelink copied
// in the meantime are adopted. Plans depend only on the observed object and
// the pool, so repeating a pass is harmless: a second plan after a successful
// write is empty.
//
// One limit: if nodelink copies an item onto a Node and the pool stops
// declaring it before a write of ours records it on that Node, the Node keeps
// it, because nothing records it as ours.
//
// # Testing
//
// Table tests cover each rule; fuzz tests check the invariants above on
// random objects (apply the patch, plan again: in sync; nothing foreign
// touched). Run them for a fixed time:
//
//	go test -run='^$' -fuzz=FuzzPlanNode -fuzztime=10s ./pkg/sync/
//	go test -run='^$' -fuzz=FuzzPlanMachine -fuzztime=10s ./pkg/sync/
//
// The seed corpora under testdata/fuzz run with every go test.
package sync
