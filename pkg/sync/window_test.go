package sync

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseWindow(t *testing.T) {
	for _, bad := range []string{
		"", "schedule=0 2 * * *", "duration=1h", "0 2 * * *; 1h",
		"schedule=0 2 * *; duration=1h",                       // four fields
		"schedule=0 25 * * *; duration=1h",                    // no hour 25
		"schedule=0 2 * * *; duration=30s",                    // under a minute
		"schedule=0 2 * * *; duration=200h",                   // over a week
		"schedule=0 2 * * *; duration=1h; timeZone=Mars/Base", // no such zone
		"schedule=CRON_TZ=UTC 0 2 * * *; duration=1h",         // two places for a zone
		"schedule=0 2 * * *; duration=1h; every=day",          // unknown key
		"schedule=@every 2h; duration=1h",                     // no fixed times
		"schedule=0 2 30 2 *; duration=1h",                    // 30 February never comes
	} {
		if w, err := ParseWindow(bad); err == nil {
			t.Errorf("ParseWindow(%q) = %+v, want an error", bad, w)
		}
	}
	w, err := ParseWindow(" schedule=30 1 * * 1-5 ; duration=2h30m; timeZone=Europe/Paris ")
	if err != nil {
		t.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	for _, tc := range []struct {
		at     time.Time
		open   bool
		change time.Time
	}{
		// Friday 2026-11-27, 01:29 in Paris: closed, opens at 01:30.
		{time.Date(2026, 11, 27, 1, 29, 0, 0, paris), false, time.Date(2026, 11, 27, 1, 30, 0, 0, paris)},
		{time.Date(2026, 11, 27, 1, 30, 0, 0, paris), true, time.Date(2026, 11, 27, 4, 0, 0, 0, paris)},
		{time.Date(2026, 11, 27, 3, 59, 59, 0, paris), true, time.Date(2026, 11, 27, 4, 0, 0, 0, paris)},
		// At its end it is closed; the next opens on Monday.
		{time.Date(2026, 11, 27, 4, 0, 0, 0, paris), false, time.Date(2026, 11, 30, 1, 30, 0, 0, paris)},
		// The same instant in UTC reads the same.
		{time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC), true, time.Date(2026, 11, 27, 4, 0, 0, 0, paris)},
	} {
		open, change := w.Open(tc.at)
		if open != tc.open || !change.Equal(tc.change) {
			t.Errorf("Open(%s) = %v, %s; want %v, %s", tc.at, open, change, tc.open, tc.change)
		}
	}
}

func TestPacingRefusesABadWindow(t *testing.T) {
	_, err := PacingFromAnnotations(map[string]string{AnnotationNoExecuteWindow: "schedule=every night; duration=1h"})
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Problems[0].Code != CodeInvalidPacing || !strings.Contains(err.Error(), "noexecute-window") {
		t.Fatalf("a bad window: %v, want a %s refusal naming the annotation", err, CodeInvalidPacing)
	}
	p, err := PacingFromAnnotations(map[string]string{AnnotationNoExecuteWindow: "schedule=@daily; duration=4h"})
	if err != nil || p.Window == nil || p.Window.Duration != 4*time.Hour || !strings.Contains(p.String(), "@daily") {
		t.Fatalf("@daily for 4h: %+v, %v", p, err)
	}
}
