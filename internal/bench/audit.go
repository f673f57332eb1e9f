package bench

import (
	"os"
	"strings"
	"time"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
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

// countAudit counts the audit log's entries from offset on, of requests
// received before `to` (zero: all).
func countAudit(path string, offset int64, to time.Time) (AuditCounts, error) {
	out := AuditCounts{ByVerb: map[string]int{}, PatchesByResource: map[string]int{}}
	events, err := localfleet.ReadAuditFrom(path, offset)
	for _, e := range events {
		if !to.IsZero() && !e.RequestReceived.Before(to) {
			continue
		}
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

// ctrlHubUser is the hub user the controller processes authenticate as (and
// impersonate config/hub's ServiceAccount with): the only user the hub's
// audit log records, so the log holds the controllers' requests and none of
// the benchmark's own.
const ctrlHubUser = "hub-node-metadata-bench-controller"

// HubCounts are one controller process's requests to the hub, from the hub's
// audit log, in a window.
type HubCounts struct {
	// ByVerb counts requests by "verb resource" (resource/subresource). A
	// watch counts once, when it starts; other requests when they complete.
	ByVerb map[string]int `json:"byVerb"`
	// Watches opened; Lease requests (leader election: one Lease per shard,
	// renewed every retry period whatever the fleet's size).
	Watches int `json:"watches"`
	Lease   int `json:"lease"`
	// Reads (get, list) and Writes (anything else), watches and the Lease aside.
	Reads  int `json:"reads"`
	Writes int `json:"writes"`
}

// Requests are the reads and writes, watches and the Lease aside.
func (h HubCounts) Requests() int { return h.Reads + h.Writes }

func (h HubCounts) add(e localfleet.AuditEvent) {
	key := e.Verb + " " + e.ObjectRef.Resource
	switch {
	case e.ObjectRef.Resource == "":
		key, _, _ = strings.Cut(e.Verb+" "+e.RequestURI, "?") // discovery
	case e.ObjectRef.Subresource != "":
		key += "/" + e.ObjectRef.Subresource
	}
	h.ByVerb[key]++
}

// hubLog follows the hub's audit log.
type hubLog struct {
	path   string
	off    int64
	events []localfleet.AuditEvent
}

// poll reads the entries written since the last poll.
func (h *hubLog) poll() error {
	if h == nil || h.path == "" {
		return nil
	}
	ev, off, err := localfleet.ReadAuditSince(h.path, h.off)
	h.off = off
	for _, e := range ev {
		if e.User.Username == ctrlHubUser {
			h.events = append(h.events, e)
		}
	}
	return err
}

// counted reports whether an audit entry is one request (a watch when it
// starts, anything else when it completes).
func counted(e localfleet.AuditEvent) bool {
	if e.Verb == "watch" {
		return e.Stage == "ResponseStarted"
	}
	return e.Stage == "ResponseComplete" || e.Stage == "Panic"
}

// isLease reports whether an entry is leader election's. client-go sends
// those with its default user agent whatever the process set
// (rest.AddUserAgent), so they are told apart by time only: they belong to
// the one controller process running then.
func isLease(e localfleet.AuditEvent) bool { return e.ObjectRef.Resource == "leases" }

// ofProcess reports whether an entry is from the process with user agent ua
// (any process when ua is empty), Lease requests of any process included.
func ofProcess(e localfleet.AuditEvent, ua string) bool {
	return ua == "" || strings.HasPrefix(e.UserAgent, ua) || isLease(e)
}

// count returns the requests of the process with user agent ua (see
// ofProcess) received in [from, to) (to zero: no end).
func (h *hubLog) count(ua string, from, to time.Time) HubCounts {
	c := HubCounts{ByVerb: map[string]int{}}
	for _, e := range h.events {
		if !counted(e) || !ofProcess(e, ua) ||
			e.RequestReceived.Before(from) || (!to.IsZero() && !e.RequestReceived.Before(to)) {
			continue
		}
		c.add(e)
		switch {
		case e.Verb == "watch":
			c.Watches++
		case isLease(e):
			c.Lease++
		case e.Verb == "get" || e.Verb == "list":
			c.Reads++
		default:
			c.Writes++
		}
	}
	return c
}

// lastActivity is when the process with user agent ua last sent a request,
// watch starts included, the Lease aside, or zero.
func (h *hubLog) lastActivity(ua string) time.Time {
	for i := len(h.events) - 1; i >= 0; i-- {
		if e := h.events[i]; counted(e) && strings.HasPrefix(e.UserAgent, ua) {
			return e.RequestReceived
		}
	}
	return time.Time{}
}

// lastRequest is when the process with user agent ua last sent a request
// that counts (watches and the Lease aside), or zero.
func (h *hubLog) lastRequest(ua string) time.Time {
	for i := len(h.events) - 1; i >= 0; i-- {
		e := h.events[i]
		if counted(e) && strings.HasPrefix(e.UserAgent, ua) && e.Verb != "watch" && !isLease(e) {
			return e.RequestReceived
		}
	}
	return time.Time{}
}

// leaseTaken is when the Lease was first written successfully after
// `after`: when a leader took it, if no other process held it then.
func (h *hubLog) leaseTaken(after time.Time) time.Time {
	for _, e := range h.events {
		if counted(e) && isLease(e) &&
			(e.Verb == "update" || e.Verb == "create" || e.Verb == "patch") && e.ResponseStatus.Code < 300 && e.RequestReceived.After(after) {
			return e.RequestReceived
		}
	}
	return time.Time{}
}

// firstSecretRead is when the process with user agent ua first read a Secret after `after`
// (a connect's kubeconfig), or zero.
func (h *hubLog) firstSecretRead(ua string, after time.Time) time.Time {
	for _, e := range h.events {
		if counted(e) && strings.HasPrefix(e.UserAgent, ua) && e.Verb == "get" && e.ObjectRef.Resource == "secrets" && e.RequestReceived.After(after) {
			return e.RequestReceived
		}
	}
	return time.Time{}
}
