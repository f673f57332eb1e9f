package remote

import (
	"strings"
)

// keptAnnotations keeps only the annotations the planner reads: this
// controller's bookkeeping (hub-node-metadata.openshift.io/*) and
// nodelink's machine.openshift.io/machine. Real Nodes carry kilobytes of
// others' annotations (OVN, MCO, CSI) that would cost hub memory per spoke.
func keptAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, "hub-node-metadata.openshift.io/") || k == "machine.openshift.io/machine" {
			if out == nil {
				out = make(map[string]string, 4)
			}
			out[k] = v
		}
	}
	return out
}
