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
// # Ownership bookkeeping
//
// Each object records what this package applied to it, in annotations:
// AnnotationOwnedLabels, AnnotationOwnedTaints and, on Machines,
// AnnotationOwnedMachineLabels. After a write the record is exactly the
// declared items, so an item the pool stops declaring is removed on the next
// pass only if it is recorded; an item present with the wanted value but not
// recorded is adopted (recorded, not written). Entries are sorted and joined
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
//	machine.openshift.io                  machine API (cluster-api-* generated and selector labels)
//	machineconfiguration.openshift.io     Machine Config Operator
//	hub-node-metadata.openshift.io        this controller's bookkeeping
//
// except node-role.kubernetes.io/<role> for any role but master and
// control-plane (infra pools set node-role.kubernetes.io/infra as a label and
// a taint). It also refuses the unprefixed cluster-autoscaler taint keys
// ToBeDeletedByClusterAutoscaler and DeletionCandidateOfClusterAutoscaler.
// A pool with any invalid item is refused whole with a *ValidationError that
// lists every problem; duplicate taints and the machine labels Hive ignores
// (HiveIgnoredMachineLabels) only warn.
//
// # Agreement with Hive, item by item
//
// Checked in Hive's source (pkg/controller/machinepool/machinepool_controller.go,
// generateMachineSets; pkg/controller/utils/taints.go, GetUniqueTaints;
// pkg/validating-webhooks/hive/v1/machinepool_validating_admission_hook.go)
// and machine-api's nodelink (pkg/controller/nodelink). Where Hive delivers an
// item to new Machines or Nodes and we refuse it, the reason is that writing it
// on existing objects is unsafe.
//
//	input                          | what Hive does                                   | what we do                          | why
//	-------------------------------+--------------------------------------------------+-------------------------------------+------------------------------------------
//	spec.labels, bad key or value  | webhook refuses (metav1 ValidateLabels)          | refuse the pool                     | same answer; such a pool cannot be created
//	spec.labels, kubernetes.io,    | webhook accepts; template gets it; nodelink      | refuse the pool                     | unsafe: overrides kubelet's and the node
//	  k8s.io (not node-role/<r>)   |   copies it onto new Nodes                       |                                     |   controllers' labels (hostname, os, arch,
//	                               |                                                  |                                     |   topology) that scheduling relies on
//	node-role.kubernetes.io/master,| delivered as above                               | refuse the pool                     | unsafe: makes a worker look like (or be
//	  /control-plane               |                                                  |                                     |   scheduled as) the control plane
//	machineconfiguration.openshift | delivered as above                               | refuse the pool                     | unsafe: MCO's own keys (pool membership,
//	  .io keys                     |                                                  |                                     |   config state) on Nodes
//	hub-node-metadata.openshift.io | delivered as above                               | refuse the pool                     | unsafe: would forge our ownership records
//	hive.openshift.io keys         | delivered as above                               | apply                               | nothing reads them on Machines or Nodes
//	spec.machineLabels, the four   | skipped: the generated template already has the  | drop with a warning (status message,| same answer: existing Machines get what new
//	  generated cluster-api-* keys |   key ("conflict with generated label")          |   PoolItemsIgnored Event), sync rest|   ones get
//	spec.machineLabels, other      | put in the template: new Machines get it         | refuse the pool                     | unsafe: machine-api's actuators set these on
//	  machine.openshift.io keys    |                                                  |                                     |   Machines (instance-type, region, zone,
//	                               |                                                  |                                     |   interruptible-instance); overwriting lies
//	spec.machineLabels, bad syntax | put in the template; creating a Machine from it  | refuse the pool                     | same outcome: it can reach no Machine
//	                               |   fails (the API server checks label syntax)     |                                     |
//	spec.taints, duplicates by     | collapsed, first value wins (GetUniqueTaints)    | collapse, first value wins, warning | same answer
//	  key+effect                   |                                                  |                                     |
//	spec.taints, bad effect, key   | no validation; in the template, but the Node API | refuse the pool                     | same outcome: nodelink's Node update is
//	  or value                     |   refuses it when nodelink copies it             |                                     |   refused, so it never reaches a Node
//	spec.taints, node.kubernetes   | delivered to new Nodes by nodelink               | refuse the pool                     | unsafe: the node lifecycle controller and
//	  .io/* and other reserved keys|                                                  |                                     |   kubelet own them (not-ready, unreachable,
//	                               |                                                  |                                     |   unschedulable); owning one means
//	                               |                                                  |                                     |   removing it when the pool drops it
//	spec.taints, the autoscaler's  | delivered as above                               | refuse the pool                     | unsafe: the cluster autoscaler owns them
//	  unprefixed keys              |                                                  |                                     |
//	more than 100 labels, 100      | no limit                                         | refuse the pool                     | keeps patches and owned-* records bounded;
//	  machine labels or 50 taints  |                                                  |                                     |   the limit is far above real pools'
//	a taint's value changes        | template updated; nodelink never updates a value | update it on Machines and Nodes     | Hive's API promises the pool wins
//	an item dropped by the pool    | removed from the template (Owned* status);       | removed where our record says we    | nothing foreign is removed
//	                               |   nodelink never removes from Nodes              |   applied it                        |
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
// it, because nothing proves it is ours.
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
