package bench

import (
	"os"

	"github.com/openshift/hub-node-metadata/pkg/localfleet"
)

// AuditCounts are the hub's requests as a spoke's audit log records them.
type AuditCounts struct {
	// ByVerb counts requests by verb. A watch counts once, when it starts
	// (stage ResponseStarted); other requests when they complete.
	ByVerb map[string]int `json:"byVerb"`
	// PatchesByResource counts patch requests by resource.
	PatchesByResource map[string]int `json:"patchesByResource"`
}

func (a *AuditCounts) add(o AuditCounts) {
	if a.ByVerb == nil {
		a.ByVerb, a.PatchesByResource = map[string]int{}, map[string]int{}
	}
	for k, v := range o.ByVerb {
		a.ByVerb[k] += v
	}
	for k, v := range o.PatchesByResource {
		a.PatchesByResource[k] += v
	}
}

// Writes counts every request that is not get, list or watch.
func (a AuditCounts) Writes() int {
	n := 0
	for v, c := range a.ByVerb {
		if v != "get" && v != "list" && v != "watch" {
			n += c
		}
	}
	return n
}

// Reads counts get, list and watch requests.
func (a AuditCounts) Reads() int { return a.ByVerb["get"] + a.ByVerb["list"] + a.ByVerb["watch"] }

// auditSize is the audit log's current size (the offset to count from).
func auditSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// countAudit counts the audit log's entries from offset on.
func countAudit(path string, offset int64) (AuditCounts, error) {
	out := AuditCounts{ByVerb: map[string]int{}, PatchesByResource: map[string]int{}}
	events, err := localfleet.ReadAuditFrom(path, offset)
	for _, e := range events {
		if e.Verb == "watch" {
			if e.Stage != "ResponseStarted" {
				continue
			}
		} else if e.Stage != "ResponseComplete" && e.Stage != "Panic" {
			continue
		}
		out.ByVerb[e.Verb]++
		if e.Verb == "patch" {
			out.PatchesByResource[e.ObjectRef.Resource]++
		}
	}
	return out, err
}
