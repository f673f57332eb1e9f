package remote

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// An unset backoff base keeps its default unless the cap set (--spoke-backoff-cap) is
// shorter: a default never raises a cap that was set.
func TestBackoffDefaultsFitTheCapSet(t *testing.T) {
	type backoff struct{ Base, Cap time.Duration }
	for name, tc := range map[string]struct {
		in, want backoff
	}{
		"nothing set":                  {want: backoff{DefaultBackoffBase, DefaultBackoffCap}},
		"cap below the default base":   {in: backoff{Cap: 500 * time.Millisecond}, want: backoff{500 * time.Millisecond, 500 * time.Millisecond}},
		"cap above the default base":   {in: backoff{Cap: 10 * time.Second}, want: backoff{DefaultBackoffBase, 10 * time.Second}},
		"base above the default cap":   {in: backoff{Base: 10 * time.Minute}, want: backoff{10 * time.Minute, 10 * time.Minute}},
		"both set":                     {in: backoff{100 * time.Millisecond, time.Second}, want: backoff{100 * time.Millisecond, time.Second}},
		"both set, the cap below base": {in: backoff{time.Hour, time.Minute}, want: backoff{time.Hour, time.Hour}},
	} {
		t.Run(name, func(t *testing.T) {
			o := Options{BackoffBase: tc.in.Base, BackoffCap: tc.in.Cap}.withDefaults()
			if diff := cmp.Diff(tc.want, backoff{o.BackoffBase, o.BackoffCap}); diff != "" {
				t.Errorf("backoff (-want +got):\n%s", diff)
			}
		})
	}
}
