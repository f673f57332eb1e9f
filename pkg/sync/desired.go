package sync

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
)

// Size limits of one MachinePool's declared metadata. A pool over a limit is
// refused with code TooMany. Hive has no limit, but our owned-* records are
// annotations, and all of an object's annotations share one 256 KiB limit with
// the ones MCO and nodelink write: at these limits the records take at most
// about 80 KB (100 keys of up to 317 bytes, twice, and 50 key:Effect
// entries), far above real pools' needs.
const (
	MaxLabels        = 100
	MaxMachineLabels = 100
	MaxTaints        = 50
)

// Problem codes: short, stable strings, fit for a metric label.
const (
	CodeInvalidKey    = "InvalidKey"
	CodeInvalidValue  = "InvalidValue"
	CodeInvalidEffect = "InvalidEffect"
	CodeReservedKey   = "ReservedKey"
	CodeTooMany       = "TooMany"
)

// Desired is the validated metadata one MachinePool declares for its Machines
// and Nodes.
type Desired struct {
	// Labels go on Nodes (and in Machine spec.metadata.labels).
	Labels map[string]string
	// MachineLabels go on the Machine objects' metadata.labels.
	MachineLabels map[string]string
	// Taints go on Nodes and Machines; one entry per key+effect, first value
	// of the pool wins, pool order kept. Only Key, Value and Effect are set.
	Taints []corev1.Taint
	// Deferred holds taint IDs (key:Effect) back on the objects planned
	// with this Desired: a paced rollout has not reached them (see
	// Deferring). A deferred taint is neither added nor changed, an observed
	// copy is kept as it is, and ownership of it is left as recorded.
	Deferred map[string]bool
	// Reclaim, on a Node, names items this controller removed from it a
	// moment ago, with the value removed. One that is back with that value,
	// and is neither declared nor owned, is removed again (OpReclaim): it is
	// nodelink's copy from a Machine it had not yet seen without it. Unused on
	// Machines, which nodelink does not write.
	Reclaim Reclaim
	// MachineNodeLabels, on a Node, are the node labels its Machine holds
	// (spec.metadata.labels) once the Machine's own write is done. nodelink
	// copies them, so a label of them that nodelink set on the Node is not
	// removed as delivered (see "Shared items" in doc.go). Unused on
	// Machines.
	MachineNodeLabels map[string]string
	// MachineRemoved, on a Node, names what its Machine's write removed from
	// spec.metadata.labels and spec.taints, with the values removed:
	// nodelink copied them onto the Node, so an unrecorded copy with the same
	// value is judged as a recorded item is (dropped.go). Unused on Machines.
	MachineRemoved Reclaim
	// Template, on a Machine, is its MachineSet's template, read when an
	// unrecorded item needs it (Plan.NeedsTemplate; dropped.go). Unused on
	// Nodes.
	Template *Template
	// Dropped, on a Machine, names the items the pool dropped (as Items
	// names them) and when it was first seen without each (NextDropped): an
	// unrecorded item is judged only if it is one of them (dropped.go).
	// Unused on Nodes.
	Dropped map[string]time.Time
	// Judged, on a Machine, says its unrecorded items were judged at its
	// current version and stay: they are not looked at again (dropped.go).
	Judged bool
}

// Reclaim is what Desired.Reclaim names: label key -> value, and taint
// key:Effect -> value.
type Reclaim struct {
	Labels, Taints map[string]string
}

// Except drops, from r itself, the items m holds with the same value, in
// the places nodelink copies from (spec.metadata.labels, spec.taints):
// nodelink's copy of those is right, not a copy-back. It returns r.
func (r Reclaim) Except(m *machinev1beta1.Machine) Reclaim {
	maps.DeleteFunc(r.Labels, func(k, v string) bool {
		have, ok := m.Spec.ObjectMeta.Labels[k]
		return ok && have == v
	})
	maps.DeleteFunc(r.Taints, func(id, v string) bool {
		return slices.ContainsFunc(m.Spec.Taints, func(t corev1.Taint) bool { return taintID(t) == id && t.Value == v })
	})
	return r
}

// Problem is one invalid item of a MachinePool spec.
type Problem struct {
	// Field names the item, e.g. spec.labels["a"] or spec.taints[2].effect.
	Field string
	// Value is the offending value (a key, a value or an effect).
	Value string
	// Code is one of the Code* constants.
	Code string
	// Reason says what is wrong, for a human.
	Reason string
}

func (p Problem) String() string {
	if p.Value != "" && !strings.Contains(p.Field, p.Value) && !strings.Contains(p.Reason, p.Value) {
		return fmt.Sprintf("%s %q: %s", p.Field, p.Value, p.Reason)
	}
	return p.Field + ": " + p.Reason
}

// ValidationError lists every problem found in a MachinePool spec. The
// user must change the pool; retrying cannot fix it.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return fmt.Sprintf("invalid MachinePool spec (%d problems): %s", len(e.Problems), strings.Join(parts, "; "))
}

// reservedDomains are key prefixes a pool may not set, for labels, machine
// labels and taints alike. A domain covers its subdomains too. Exceptions are
// in reservedKey: adminDomains, adminLabels and node-role.kubernetes.io roles
// other than the control plane's.
var reservedDomains = []struct {
	domain, reason string
}{
	{"kubernetes.io", "the kubernetes.io domain belongs to Kubernetes"},
	{"k8s.io", "the k8s.io domain belongs to Kubernetes"},
	{"machine.openshift.io", "the machine.openshift.io domain belongs to the machine API"},
	{"machineconfiguration.openshift.io", "the machineconfiguration.openshift.io domain belongs to the Machine Config Operator"},
	{"hub-node-metadata.openshift.io", "the hub-node-metadata.openshift.io domain holds this controller's bookkeeping"},
}

// adminDomains are subdomains of a reserved domain that exist for the cluster
// admin's own keys, so pools may use them (and their subdomains) for labels,
// machine labels and taints: no component sets keys there. The NodeRestriction
// admission plugin forbids kubelets to set node-restriction.kubernetes.io
// labels, so that admins can label Nodes with keys a Node cannot forge.
var adminDomains = []string{"node-restriction.kubernetes.io"}

// adminLabels are single label keys of a reserved domain that only admins set
// on Nodes, so pools may use them as labels (not as taint keys).
var adminLabels = map[string]bool{
	// Well-known: the service controller leaves the Node out of external
	// load balancers. Nothing sets it but an admin.
	corev1.LabelNodeExcludeBalancers: true,
}

// HiveIgnoredMachineLabels are the machine label keys Hive leaves out of a
// MachineSet's template, each mapped to who generates it (the end of the
// warning's sentence "it conflicts with a label ..."). Hive's machinepool
// controller (generateMachineSets) skips any spec.machineLabels key the
// generated template already has ("conflict with generated label --
// ignoring"), and the template the installer generates for Hive carries these:
// machine-api's four cluster-api-* labels on every platform, and the OS stream
// label when the installer's OSStreams feature gate is on (its default since
// Hive's installer of July 2026). DesiredFromPool drops them with a warning and
// syncs the rest of the pool, so existing Machines get what new ones get.
var HiveIgnoredMachineLabels = map[string]string{
	LabelClusterAPICluster: "machine-api generates",
	LabelMachineRole:       "machine-api generates",
	LabelMachineType:       "machine-api generates",
	LabelMachineSet:        "machine-api generates",
	LabelOSStream:          "the installer generates when its OSStreams feature gate is on",
}

// ignoredMachineLabelWarning is the warning for a machine label Hive ignores.
func ignoredMachineLabelWarning(key, generatedBy string) string {
	return fmt.Sprintf("spec.machineLabels[%q]: ignored, as Hive ignores it: it conflicts with a label %s", key, generatedBy)
}

// reservedTaintKeys are unprefixed taint keys a pool may not set.
var reservedTaintKeys = map[string]string{
	"ToBeDeletedByClusterAutoscaler":       "the cluster autoscaler owns this taint",
	"DeletionCandidateOfClusterAutoscaler": "the cluster autoscaler owns this taint",
}

// nodeRoleDomain is the one kubernetes.io subdomain pools may use, for roles
// other than the control plane's (infra pools use node-role.kubernetes.io/infra).
const nodeRoleDomain = "node-role.kubernetes.io"

var reservedNodeRoles = map[string]bool{"master": true, "control-plane": true}

// inDomain reports whether prefix is domain or one of its subdomains.
func inDomain(prefix, domain string) bool {
	return prefix == domain || strings.HasSuffix(prefix, "."+domain)
}

// reservedKey reports whether key is reserved and why. taint selects the
// taint-only entries too.
func reservedKey(key string, taint bool) (bool, string) {
	if taint {
		if why, ok := reservedTaintKeys[key]; ok {
			return true, why
		}
	} else if adminLabels[key] {
		return false, ""
	}
	prefix, name, found := strings.Cut(key, "/")
	if !found {
		return false, ""
	}
	if prefix == nodeRoleDomain {
		if reservedNodeRoles[name] {
			return true, "the " + name + " node role belongs to the control plane"
		}
		return false, ""
	}
	for _, d := range adminDomains {
		if inDomain(prefix, d) {
			return false, ""
		}
	}
	for _, r := range reservedDomains {
		if inDomain(prefix, r.domain) {
			return true, r.reason
		}
	}
	return false, ""
}

var validEffects = map[corev1.TaintEffect]bool{
	corev1.TaintEffectNoSchedule:       true,
	corev1.TaintEffectPreferNoSchedule: true,
	corev1.TaintEffectNoExecute:        true,
}

// DesiredFromPool validates a MachinePool spec and returns what it declares.
// Warnings name items that were accepted with a correction (duplicate taints,
// the first value wins) or ignored as Hive ignores them
// (HiveIgnoredMachineLabels: left out of Desired, their values unchecked); the
// caller surfaces them, and they come back even with an error. Any invalid
// item makes the whole pool invalid: the error is a *ValidationError listing
// every problem, and Desired is empty.
func DesiredFromPool(spec hivev1.MachinePoolSpec) (Desired, []string, error) {
	var problems []Problem
	add := func(field, value, code, reason string) {
		problems = append(problems, Problem{Field: field, Value: value, Code: code, Reason: reason})
	}

	var warnings []string
	machineLabels := spec.MachineLabels
	for _, k := range sortedKeys(spec.MachineLabels) {
		if generator, ignored := HiveIgnoredMachineLabels[k]; ignored {
			if len(machineLabels) == len(spec.MachineLabels) {
				machineLabels = copyMap(spec.MachineLabels)
			}
			delete(machineLabels, k)
			warnings = append(warnings, ignoredMachineLabelWarning(k, generator))
		}
	}
	checkLabels := func(path string, labels map[string]string, max int) {
		if len(labels) > max {
			add(path, fmt.Sprint(len(labels)), CodeTooMany, fmt.Sprintf("too many: %d, at most %d", len(labels), max))
		}
		for _, k := range sortedKeys(labels) {
			field := fmt.Sprintf("%s[%q]", path, k)
			if errs := content.IsLabelKey(k); len(errs) > 0 {
				add(field, k, CodeInvalidKey, "invalid key: "+strings.Join(errs, ", "))
			} else if r, why := reservedKey(k, false); r {
				add(field, k, CodeReservedKey, "reserved key: "+why)
			}
			if errs := content.IsLabelValue(labels[k]); len(errs) > 0 {
				add(field, labels[k], CodeInvalidValue, fmt.Sprintf("invalid value %q: %s", labels[k], strings.Join(errs, ", ")))
			}
		}
	}
	checkLabels("spec.labels", spec.Labels, MaxLabels)
	checkLabels("spec.machineLabels", machineLabels, MaxMachineLabels)

	if len(spec.Taints) > MaxTaints {
		add("spec.taints", fmt.Sprint(len(spec.Taints)), CodeTooMany, fmt.Sprintf("too many: %d, at most %d", len(spec.Taints), MaxTaints))
	}
	var taints []corev1.Taint
	first := map[string]int{} // key:Effect -> index in spec.taints
	for i, t := range spec.Taints {
		path := fmt.Sprintf("spec.taints[%d]", i)
		switch errs := content.IsLabelKey(t.Key); {
		case t.Key == "":
			add(path+".key", "", CodeInvalidKey, "invalid key: required")
		case len(errs) > 0:
			add(path+".key", t.Key, CodeInvalidKey, "invalid key: "+strings.Join(errs, ", "))
		default:
			if r, why := reservedKey(t.Key, true); r {
				add(path+".key", t.Key, CodeReservedKey, "reserved key: "+why)
			}
		}
		if errs := content.IsLabelValue(t.Value); len(errs) > 0 {
			add(path+".value", t.Value, CodeInvalidValue, fmt.Sprintf("invalid value %q: %s", t.Value, strings.Join(errs, ", ")))
		}
		if !validEffects[t.Effect] {
			add(path+".effect", string(t.Effect), CodeInvalidEffect,
				fmt.Sprintf("invalid effect %q: must be NoSchedule, PreferNoSchedule or NoExecute", t.Effect))
		}
		id := taintID(t)
		if j, dup := first[id]; dup {
			warnings = append(warnings, fmt.Sprintf("%s: duplicate of spec.taints[%d] (%s); the first value %q wins over %q",
				path, j, id, spec.Taints[j].Value, t.Value))
			continue
		}
		first[id] = i
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}

	if len(problems) > 0 {
		return Desired{}, warnings, &ValidationError{Problems: problems}
	}
	return Desired{
		Labels:        copyMap(spec.Labels),
		MachineLabels: copyMap(machineLabels),
		Taints:        taints,
	}, warnings, nil
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// copyMap is a copy of m, nil when m is empty.
func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
