package sync

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Window is a maintenance window for NoExecute batches, as Karpenter's
// disruption budgets have them: it opens at every activation of a cron
// schedule, in a time zone, and stays open for a duration. Outside it no
// new batch starts; a batch under way finishes, and removals are never
// paced.
type Window struct {
	// Spec is the annotation as written, for messages.
	Spec     string
	schedule cron.Schedule
	Duration time.Duration
	Location *time.Location
}

// MaxWindowDuration bounds a window's duration: a week, the longest gap a
// weekly schedule leaves.
const MaxWindowDuration = 7 * 24 * time.Hour

// ParseWindow reads the noexecute-window annotation:
//
//	schedule=<cron>; duration=<duration>[; timeZone=<IANA name>]
//
// The schedule has the standard five fields (minute hour day-of-month month
// day-of-week) or a descriptor such as @daily, parsed by robfig/cron; the
// time zone defaults to UTC.
func ParseWindow(v string) (*Window, error) {
	w := &Window{Spec: strings.TrimSpace(v), Location: time.UTC}
	var schedule, duration string
	for part := range strings.SplitSeq(v, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, value, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value: want \"schedule=<cron>; duration=<duration>[; timeZone=<zone>]\"", part)
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "schedule":
			schedule = value
		case "duration":
			duration = value
		case "timeZone":
			loc, err := time.LoadLocation(value)
			if err != nil || value == "" || value == "Local" {
				return nil, fmt.Errorf("timeZone %q is not an IANA time zone (\"Europe/Paris\", \"UTC\")", value)
			}
			w.Location = loc
		default:
			return nil, fmt.Errorf("unknown key %q: want schedule, duration and timeZone", strings.TrimSpace(key))
		}
	}
	if schedule == "" || duration == "" {
		return nil, fmt.Errorf("want both schedule=<cron> and duration=<duration>, e.g. \"schedule=0 2 * * 1-5; duration=3h; timeZone=Europe/Paris\"")
	}
	if strings.Contains(schedule, "TZ=") {
		return nil, fmt.Errorf("schedule %q names a time zone: use timeZone=", schedule)
	}
	if strings.HasPrefix(schedule, "@every") {
		// Counted from whenever it is asked, not from a fixed time: its
		// openings would move with every sync.
		return nil, fmt.Errorf("schedule %q: @every has no fixed times; use the five fields or @hourly, @daily, @weekly", schedule)
	}
	sched, err := cron.ParseStandard(schedule)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", schedule, err)
	}
	if sched.Next(time.Now().In(w.Location)).IsZero() {
		return nil, fmt.Errorf("schedule %q never fires (no such date)", schedule)
	}
	w.schedule = sched
	d, err := time.ParseDuration(duration)
	if err != nil || d < time.Minute || d > MaxWindowDuration {
		return nil, fmt.Errorf("duration %q: want a duration from 1m to %s (\"3h\", \"90m\")", duration, MaxWindowDuration)
	}
	w.Duration = d
	return w, nil
}

// Open reports whether the window is open at t, and if so when it closes;
// if not, when it next opens.
func (w *Window) Open(t time.Time) (open bool, change time.Time) {
	t = t.In(w.Location)
	// The first opening after t-Duration: at or before t, the window
	// that opened then is still open at t.
	if start := w.schedule.Next(t.Add(-w.Duration)); !start.IsZero() && !start.After(t) {
		return true, start.Add(w.Duration)
	}
	return false, w.schedule.Next(t)
}

// String says the window for people: its annotation.
func (w *Window) String() string { return w.Spec }
