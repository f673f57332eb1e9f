package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

// idleSettle is how long an idle controller is left after every cluster is
// in sync before its window opens.
const idleSettle = 5 * time.Second

// idle runs a controller of its own on the fleet in sync, with the resync
// period shortened (Config.IdleResync, printed as an override) so that the
// window spans several resyncs of every cluster, and counts every request it
// sends to the spokes (their audit logs) and to the hub (the hub's).
func (b *bench) idle(ctx context.Context, spokes []*localfleet.Spoke) error {
	id := &b.rep.Idle
	var extra []string
	if b.cfg.IdleResync > 0 {
		extra = append(extra, "--resync-period="+b.cfg.IdleResync.String())
		id.Resync = b.cfg.IdleResync.String()
	}
	proc, err := b.startController(ctx, "idle", extra...)
	if err != nil {
		return err
	}
	defer proc.stop()
	if err := b.waitInSync(ctx, proc, len(spokes), b.cfg.ConvergeTimeout); err != nil {
		return err
	}
	time.Sleep(idleSettle)
	offsets := map[string]int64{}
	for _, s := range spokes {
		offsets[s.Name] = auditSize(s.AuditLogPath)
	}
	before, err := proc.scrape()
	if err != nil {
		return err
	}
	b.logf("idle window: %s (resync period %s)", b.cfg.Idle, or(id.Resync, "default"))
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-proc.done:
		return fmt.Errorf("controller exited: %w (log %s)", proc.err, proc.logPath)
	case <-time.After(b.cfg.Idle):
	}
	t1 := time.Now()
	after, err := proc.scrape()
	if err != nil {
		return err
	}
	window := t1.Sub(t0)
	id.WindowS = b.cfg.Idle.Seconds()
	id.Spokes = len(spokes)
	id.Audit = AuditCounts{ByVerb: map[string]int{}, PatchesByResource: map[string]int{}}
	for _, s := range spokes {
		c, err := countAudit(s.AuditLogPath, offsets[s.Name], t1)
		if err != nil {
			return err
		}
		id.Audit.add(c)
	}
	id.Writes, id.Reads = id.Audit.Writes(), id.Audit.Reads()
	id.ReadsPerSpokePerMin = float64(id.Reads) / float64(len(spokes)) / window.Minutes()
	id.SpokePerHour = map[string]float64{}
	for v, n := range id.Audit.ByVerb {
		id.SpokePerHour[v] = float64(n) / float64(len(spokes)) / window.Hours()
	}
	id.RemoteByVerb = map[string]int{}
	for _, v := range []string{"get", "list", "watch", "patch", "update", "create", "delete"} {
		d := after.Sum("hub_node_metadata_remote_requests_total", map[string]string{"verb": v}) - before.Sum("hub_node_metadata_remote_requests_total", map[string]string{"verb": v})
		if d != 0 {
			id.RemoteByVerb[v] = int(d)
		}
	}
	id.Patched = after.Sum("hub_node_metadata_patches_total", map[string]string{"result": "Patched"}) - before.Sum("hub_node_metadata_patches_total", map[string]string{"result": "Patched"})
	// Reconciles in the window: the resyncs happened, and cost what they cost.
	id.Reconciles = reconcilesBetween(before, after)
	id.HeapReleases = after.Sum("hub_node_metadata_heap_releases_total", nil) - before.Sum("hub_node_metadata_heap_releases_total", nil)
	id.Clusters = int(after.Sum("hub_node_metadata_clusters", nil))
	time.Sleep(time.Second) // the audit backend has written the window's last entries
	if err := b.hub.poll(); err != nil {
		return err
	}
	id.Hub = b.hub.count(proc.ua, t0, t1)
	b.logf("idle: spokes %d writes, %d reads (%v); hub %d writes, %d reads, %d watches, %d Lease; %.0f reconciles; %.0f heap releases", id.Writes, id.Reads, id.Audit.ByVerb, id.Hub.Writes, id.Hub.Reads, id.Hub.Watches, id.Hub.Lease, id.Reconciles, id.HeapReleases)
	return nil
}
