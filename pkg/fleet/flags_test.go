package fleet

import (
	"flag"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// settleArgs parses args as `hub-controller run` does and settles what the
// manager would run with.
func settleArgs(t *testing.T, args ...string) (settled, error) {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var rc RunConfig
	rc.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return settle(rc.Manager, rc.Options)
}

const ms = time.Millisecond

func TestFlagDefaultsLeaderElectionTimings(t *testing.T) {
	le := []string{"--leader-elect"}
	for name, tc := range map[string]struct {
		args []string
		want electionTimings
		// err lists what the error must name; the flags of the test's args
		// it names must be the ones set (see namedFlags).
		err []string
	}{
		"nothing set": {
			args: le,
			want: electionTimings{Lease: 15 * time.Second, Renew: 10 * time.Second, Retry: 2 * time.Second, WarmAfter: 8 * time.Second},
		},
		"without --leader-elect nothing is timed nor refused": {
			args: []string{"--leader-elect-lease-duration=8s", "--leader-elect-renew-deadline=10s"},
		},
		"lease 8s": {
			args: append(le, "--leader-elect-lease-duration=8s"),
			want: electionTimings{Lease: 8 * time.Second, Renew: 5333 * ms, Retry: 1067 * ms, WarmAfter: 4267 * ms},
		},
		"lease 4s": {
			args: append(le, "--leader-elect-lease-duration=4s"),
			want: electionTimings{Lease: 4 * time.Second, Renew: 2667 * ms, Retry: 533 * ms, WarmAfter: 2133 * ms},
		},
		"lease 30s keeps the default renew deadline, retry period and warm-up, which fit": {
			args: append(le, "--leader-elect-lease-duration=30s"),
			want: electionTimings{Lease: 30 * time.Second, Renew: 10 * time.Second, Retry: 2 * time.Second, WarmAfter: 8 * time.Second},
		},
		"lease 60s": {
			args: append(le, "--leader-elect-lease-duration=60s"),
			want: electionTimings{Lease: 60 * time.Second, Renew: 10 * time.Second, Retry: 2 * time.Second, WarmAfter: 8 * time.Second},
		},
		"lease 10ms": {
			args: append(le, "--leader-elect-lease-duration=10ms"),
			want: electionTimings{Lease: 10 * ms, Renew: 7 * ms, Retry: 1 * ms, WarmAfter: 5 * ms},
		},
		"lease and renew set": {
			args: append(le, "--leader-elect-lease-duration=8s", "--leader-elect-renew-deadline=6s"),
			want: electionTimings{Lease: 8 * time.Second, Renew: 6 * time.Second, Retry: 1200 * ms, WarmAfter: 4800 * ms},
		},
		"lease, renew and retry set short": {
			args: append(le, "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"),
			want: electionTimings{Lease: 4 * time.Second, Renew: 3 * time.Second, Retry: 1 * time.Second, WarmAfter: 3 * time.Second},
		},
		"all set and consistent": {
			args: append(le, "--leader-elect-lease-duration=20s", "--leader-elect-renew-deadline=16s", "--leader-elect-retry-period=500ms", "--standby-warm-after=8600ms"),
			want: electionTimings{Lease: 20 * time.Second, Renew: 16 * time.Second, Retry: 500 * ms, WarmAfter: 8600 * ms},
		},
		"all set, the warm-up while a late leader may still renew": {
			args: append(le, "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms", "--standby-warm-after=2s"),
			err:  []string{"--standby-warm-after=2s", "--leader-elect-retry-period=500ms", "--leader-elect-renew-deadline=3s"},
		},
		"all set at the defaults, the warm-up at a late renewal": {
			args: append(le, "--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s", "--standby-warm-after=7s"),
			err:  []string{"--standby-warm-after=7s", "--leader-elect-retry-period=2s", "--leader-elect-renew-deadline=10s"},
		},
		"all set at the defaults, the warm-up at the Lease's expiry": {
			args: append(le, "--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s", "--standby-warm-after=15s"),
			err:  []string{"--standby-warm-after=15s", "--leader-elect-lease-duration=15s"},
		},
		"all set, the renew deadline beyond the lease": {
			args: append(le, "--leader-elect-lease-duration=8s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s", "--standby-warm-after=7500ms"),
			err:  []string{"--leader-elect-renew-deadline=10s", "--leader-elect-lease-duration=8s"},
		},
		"renew deadline beyond the lease": {
			args: append(le, "--leader-elect-lease-duration=8s", "--leader-elect-renew-deadline=10s"),
			err:  []string{"--leader-elect-renew-deadline=10s", "--leader-elect-lease-duration=8s"},
		},
		"renew deadline within 1.2 retry periods": {
			args: append(le, "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"),
			err:  []string{"--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"},
		},
		"lease and retry leave no renew deadline": {
			args: append(le, "--leader-elect-lease-duration=6s", "--leader-elect-retry-period=5s"),
			err:  []string{"--leader-elect-retry-period=5s", "--leader-elect-lease-duration=6s"},
		},
		"lease and retry: the renew deadline between them": {
			args: append(le, "--leader-elect-lease-duration=10s", "--leader-elect-retry-period=5s"),
			want: electionTimings{Lease: 10 * time.Second, Renew: 8 * time.Second, Retry: 5 * time.Second, WarmAfter: 9500 * ms},
		},
		"renew 20s alone lengthens the lease": {
			args: append(le, "--leader-elect-renew-deadline=20s"),
			want: electionTimings{Lease: 30 * time.Second, Renew: 20 * time.Second, Retry: 2 * time.Second, WarmAfter: 13 * time.Second},
		},
		"renew 5s alone": {
			args: append(le, "--leader-elect-renew-deadline=5s"),
			want: electionTimings{Lease: 15 * time.Second, Renew: 5 * time.Second, Retry: 1 * time.Second, WarmAfter: 8 * time.Second},
		},
		"retry 1s alone keeps the defaults, which fit": {
			args: append(le, "--leader-elect-retry-period=1s"),
			want: electionTimings{Lease: 15 * time.Second, Renew: 10 * time.Second, Retry: 1 * time.Second, WarmAfter: 8 * time.Second},
		},
		"retry 4s alone": {
			args: append(le, "--leader-elect-retry-period=4s"),
			want: electionTimings{Lease: 30 * time.Second, Renew: 20 * time.Second, Retry: 4 * time.Second, WarmAfter: 16 * time.Second},
		},
		"warm-up set to its default": {
			args: append(le, "--standby-warm-after=8s"),
			want: electionTimings{Lease: 15 * time.Second, Renew: 10 * time.Second, Retry: 2 * time.Second, WarmAfter: 8 * time.Second},
		},
		"warm-up set legal with the default Lease": {
			args: append(le, "--standby-warm-after=12s"),
			want: electionTimings{Lease: 22500 * ms, Renew: 10 * time.Second, Retry: 2 * time.Second, WarmAfter: 12 * time.Second},
		},
		"warm-up 0": {
			args: append(le, "--standby-warm-after=0"),
			want: electionTimings{Lease: 15 * time.Second, Renew: 10 * time.Second, Retry: 2 * time.Second},
		},
		"warm-up 0 with lease 8s": {
			args: append(le, "--leader-elect-lease-duration=8s", "--standby-warm-after=0"),
			want: electionTimings{Lease: 8 * time.Second, Renew: 5333 * ms, Retry: 1067 * ms},
		},
		"warm-up 5s alone shortens the renew deadline and retry period to fit": {
			args: append(le, "--standby-warm-after=5s"),
			want: electionTimings{Lease: 15 * time.Second, Renew: 6250 * ms, Retry: 1250 * ms, WarmAfter: 5 * time.Second},
		},
		"warm-up 20s alone lengthens the lease": {
			args: append(le, "--standby-warm-after=20s"),
			want: electionTimings{Lease: 37500 * ms, Renew: 10 * time.Second, Retry: 2 * time.Second, WarmAfter: 20 * time.Second},
		},
		"warm-up and lease 8s": {
			args: append(le, "--leader-elect-lease-duration=8s", "--standby-warm-after=6s"),
			want: electionTimings{Lease: 8 * time.Second, Renew: 5333 * ms, Retry: 1067 * ms, WarmAfter: 6 * time.Second},
		},
		"warm-up beyond the lease": {
			args: append(le, "--leader-elect-lease-duration=8s", "--standby-warm-after=8s"),
			err:  []string{"--standby-warm-after=8s", "--leader-elect-lease-duration=8s"},
		},
		"warm-up within half the renew deadline": {
			args: append(le, "--leader-elect-renew-deadline=10s", "--standby-warm-after=5s"),
			err:  []string{"--standby-warm-after=5s", "--leader-elect-renew-deadline=10s"},
		},
		"warm-up within 1.6 retry periods": {
			args: append(le, "--leader-elect-retry-period=2s", "--standby-warm-after=3s"),
			err:  []string{"--standby-warm-after=3s", "--leader-elect-retry-period=2s"},
		},
		"no room for a warm-up that was not set: off, and said": {
			args: append(le, "--leader-elect-lease-duration=10s", "--leader-elect-renew-deadline=9s", "--leader-elect-retry-period=7s"),
			want: electionTimings{Lease: 10 * time.Second, Renew: 9 * time.Second, Retry: 7 * time.Second,
				WarmOff: "no standby warm-up: it must start after the retry period plus half the renew deadline (11.5s), which leaves no time before the lease duration (10s) runs out"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			st, err := settleArgs(t, tc.args...)
			if tc.err != nil {
				if err == nil {
					t.Fatalf("settled %+v, want an error naming %v", st.election, tc.err)
				}
				for _, want := range tc.err {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %s", err, want)
					}
				}
				if named := namedFlags(err); !isSubset(named, setFlags(tc.args)) {
					t.Errorf("error %q names %v, not all set by %v", err, named, tc.args)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, st.election); diff != "" {
				t.Errorf("timings (-want +got):\n%s", diff)
			}
		})
	}
}

var namedFlag = regexp.MustCompile(`--[a-z-]+=`)

// namedFlags lists the flags an error names with a value: those it says the user set.
func namedFlags(err error) []string {
	var out []string
	for _, m := range namedFlag.FindAllString(err.Error(), -1) {
		out = append(out, strings.TrimSuffix(m, "="))
	}
	return out
}

func setFlags(args []string) []string {
	var out []string
	for _, a := range args {
		out = append(out, strings.SplitN(a, "=", 2)[0])
	}
	return out
}

func isSubset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// Every combination of the four durations, each unset or set to one of a range of values:
// what runs keeps what was set and satisfies client-go and the warm-up's window; a refusal
// names only flags that were set, and no value of the unset ones would have worked.
func TestFlagDefaultsLeaderElectionNeverRefuseWhatCouldWork(t *testing.T) {
	values := []time.Duration{0, 10 * ms, 500 * ms, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second,
		5 * time.Second, 8 * time.Second, 10 * time.Second, 15 * time.Second, 20 * time.Second, time.Minute}
	warms := append([]time.Duration{-1}, values...) // -1: unset; 0: never
	// Candidates for the unset durations when a refusal is checked: dense enough to
	// find a gap between the set values of the grid.
	var cands []time.Duration
	for d := time.Millisecond; d < 10*time.Minute; d = d * 21 / 20 {
		cands = append(cands, d)
	}
	fits := func(l, d, r, w time.Duration) bool {
		return l > d && d > jittered(r) && r > 0 && (w <= 0 || r+d/2 < w && w < l)
	}
	// pick returns the candidates of a duration: the one set, or every candidate.
	pick := func(set time.Duration) []time.Duration {
		if set > 0 {
			return []time.Duration{set}
		}
		return cands
	}
	refused, ran := 0, 0
	for _, l := range values {
		for _, d := range values {
			for _, r := range values {
				for _, w := range warms {
					mc := ManagerConfig{LeaderElection: true, LeaseDuration: l, RenewDeadline: d, RetryPeriod: r}
					if w >= 0 {
						mc.StandbyWarmAfter = &w
					}
					got, err := mc.timings()
					if err != nil {
						refused++
						var set []string
						for _, f := range strings.Fields(mc.timingFlags()) {
							set = append(set, strings.SplitN(f, "=", 2)[0])
						}
						if len(set) < 2 || !isSubset(namedFlags(err), set) || len(namedFlags(err)) == 0 {
							t.Errorf("%s: refused with %q", mc.timingFlags(), err)
							continue
						}
						wantWarm := max(w, 0)
						for _, cl := range pick(l) {
							for _, cd := range pick(d) {
								for _, cr := range pick(r) {
									if fits(cl, cd, cr, wantWarm) {
										t.Fatalf("%s: refused with %q, but lease %s, renew %s, retry %s would work", mc.timingFlags(), err, cl, cd, cr)
									}
								}
							}
						}
						continue
					}
					ran++
					if !fits(got.Lease, got.Renew, got.Retry, got.WarmAfter) ||
						l > 0 && got.Lease != l || d > 0 && got.Renew != d || r > 0 && got.Retry != r ||
						w >= 0 && got.WarmAfter != w && !(w == 0 && got.WarmAfter == 0) ||
						w < 0 && got.WarmAfter == 0 && got.WarmOff == "" || got.WarmAfter > 0 && got.WarmOff != "" {
						t.Errorf("%s: %+v", mc.timingFlags(), got)
					}
				}
			}
		}
	}
	t.Logf("%d combinations run, %d refused", ran, refused)
}

func TestFlagDefaultsBindAddresses(t *testing.T) {
	for name, tc := range map[string]struct {
		args           []string
		metrics, probe string
		err            bool
	}{
		"nothing set":                          {metrics: ":8080", probe: ":8081"},
		"both set as shipped":                  {args: []string{"--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"}, metrics: ":8080", probe: ":8081"},
		"metrics on the probes' default port":  {args: []string{"--metrics-bind-address=:8081"}, metrics: ":8081", probe: ":8080"},
		"metrics on a host, the probes' port":  {args: []string{"--metrics-bind-address=127.0.0.1:8081"}, metrics: "127.0.0.1:8081", probe: ":8080"},
		"probes on the metrics' default port":  {args: []string{"--health-probe-bind-address=:8080"}, metrics: ":8081", probe: ":8080"},
		"metrics elsewhere":                    {args: []string{"--metrics-bind-address=:9090"}, metrics: ":9090", probe: ":8081"},
		"metrics off":                          {args: []string{"--metrics-bind-address=0"}, metrics: "0", probe: ":8081"},
		"both off":                             {args: []string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}, metrics: "0", probe: "0"},
		"both on any free port":                {args: []string{"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"}, metrics: "127.0.0.1:0", probe: "127.0.0.1:0"},
		"the same port on two hosts":           {args: []string{"--metrics-bind-address=127.0.0.1:9000", "--health-probe-bind-address=127.0.0.2:9000"}, metrics: "127.0.0.1:9000", probe: "127.0.0.2:9000"},
		"both set to one port":                 {args: []string{"--metrics-bind-address=:9000", "--health-probe-bind-address=127.0.0.1:9000"}, err: true},
		"both set to the probes' default port": {args: []string{"--metrics-bind-address=:8081", "--health-probe-bind-address=:8081"}, err: true},
	} {
		t.Run(name, func(t *testing.T) {
			st, err := settleArgs(t, tc.args...)
			if tc.err {
				if err == nil || !isSubset(setFlags(tc.args), namedFlags(err)) {
					t.Errorf("error %v, want one naming %v", err, tc.args)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{tc.metrics, tc.probe}, []string{st.metricsAddr, st.probeAddr}); diff != "" {
				t.Errorf("metrics and probe addresses (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFlagDefaultsRetryBackoffAndShards(t *testing.T) {
	type backoff struct{ Base, Cap time.Duration }
	for name, tc := range map[string]struct {
		args []string
		want backoff
		err  []string
	}{
		"nothing set":                          {want: backoff{500 * ms, 5 * time.Minute}},
		"cap below the default base":           {args: []string{"--retry-cap=100ms"}, want: backoff{100 * ms, 100 * ms}},
		"cap above the default base":           {args: []string{"--retry-cap=1s"}, want: backoff{500 * ms, time.Second}},
		"base above the default cap":           {args: []string{"--retry-base=10m"}, want: backoff{10 * time.Minute, 10 * time.Minute}},
		"base below the default cap":           {args: []string{"--retry-base=1s"}, want: backoff{time.Second, 5 * time.Minute}},
		"both set":                             {args: []string{"--retry-base=1s", "--retry-cap=10s"}, want: backoff{time.Second, 10 * time.Second}},
		"both set equal":                       {args: []string{"--retry-base=1s", "--retry-cap=1s"}, want: backoff{time.Second, time.Second}},
		"both set, the cap below the base":     {args: []string{"--retry-base=2s", "--retry-cap=1s"}, err: []string{"--retry-cap=1s", "--retry-base=2s"}},
		"shards":                               {args: []string{"--shard-count=2", "--shard-index=1"}, want: backoff{500 * ms, 5 * time.Minute}},
		"a shard index without its count":      {args: []string{"--shard-index=1"}, err: []string{"--shard-index=1"}},
		"a shard index beyond its count":       {args: []string{"--shard-count=2", "--shard-index=2"}, err: []string{"--shard-index=2"}},
		"a negative shard index":               {args: []string{"--shard-index=-1"}, err: []string{"--shard-index=-1"}},
		"other flags keep their plain default": {args: []string{"--sync-timeout=1s", "--spoke-probe-interval=1s", "--spoke-probe-timeout=30s"}, want: backoff{500 * ms, 5 * time.Minute}},
	} {
		t.Run(name, func(t *testing.T) {
			st, err := settleArgs(t, tc.args...)
			if tc.err != nil {
				if err == nil {
					t.Fatalf("no error, want one naming %v", tc.err)
				}
				for _, want := range tc.err {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %s", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, backoff{st.opts.RetryBase, st.opts.RetryCap}); diff != "" {
				t.Errorf("retry backoff (-want +got):\n%s", diff)
			}
		})
	}
}

// -h says every default, including those left zero until derived.
func TestFlagDefaultsInHelp(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var rc RunConfig
	rc.BindFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		switch f.Name {
		case "leader-elect", "dry-run", "leader-elect-namespace", "shard-index":
			return // false, "" and 0 are their defaults
		}
		if f.DefValue == "" || f.DefValue == "0" || f.DefValue == "0s" {
			if !strings.Contains(f.Usage, "(default ") {
				t.Errorf("--%s: its usage %q does not say its default", f.Name, f.Usage)
			}
		}
	})
}
