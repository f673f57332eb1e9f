package remote

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/flowcontrol"
)

// MetricsPrefix prefixes every metric this package exports.
const MetricsPrefix = "hub_node_metadata_remote_"

// Metrics are the package's Prometheus metrics. A nil *Metrics records nothing.
//
// Cardinality: the per-cluster series (connected, connection_errors_total) are deleted by
// Manager.Forget; the request series carry no cluster label on purpose (fleet-wide latency and
// error rates, bounded by verbs x resources x codes).
type Metrics struct {
	// Connected is 1 while the cluster (namespace/name) has a healthy, synced connection, else 0.
	Connected *prometheus.GaugeVec
	// ConnectionErrors counts failed connects, probe-failure disconnects and auth-triggered
	// disconnects, by cluster and Reason.
	ConnectionErrors *prometheus.CounterVec
	// RequestDuration observes spoke request latency (watches excluded: they are long-running).
	RequestDuration *prometheus.HistogramVec
	// Requests counts spoke requests by verb, resource and HTTP code ("error" when no response).
	Requests *prometheus.CounterVec
	// RequestsRefused counts requests the allow-list refused before they left the hub.
	RequestsRefused *prometheus.CounterVec
	// RateLimiterWait sums the time spoke requests waited in their spoke's client-side rate
	// limiter (--spoke-qps / --spoke-burst), all clusters.
	RateLimiterWait prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (skipped when reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricsPrefix + "connected",
			Help: "1 if the hub has a healthy, synced connection to the spoke cluster (namespace/name), else 0.",
		}, []string{"cluster"}),
		ConnectionErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricsPrefix + "connection_errors_total",
			Help: "Failed connection attempts and disconnects of a spoke cluster, by reason.",
		}, []string{"cluster", "reason"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricsPrefix + "request_duration_seconds",
			Help:    "Latency of requests to spoke API servers (all clusters; watches excluded).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"verb", "resource"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricsPrefix + "requests_total",
			Help: "Requests to spoke API servers (all clusters) by verb, resource and HTTP code.",
		}, []string{"verb", "resource", "code"}),
		RequestsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricsPrefix + "requests_refused_total",
			Help: "Requests to spoke API servers refused by the hub's least-authority allow-list.",
		}, []string{"verb"}),
		RateLimiterWait: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricsPrefix + "rate_limiter_wait_seconds_total",
			Help: "Seconds spoke requests spent waiting in the per-spoke client-side rate limiters (all clusters).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Connected, m.ConnectionErrors, m.RequestDuration, m.Requests, m.RequestsRefused, m.RateLimiterWait)
	}
	return m
}

func (m *Metrics) setConnected(cluster string, connected bool) {
	if m == nil {
		return
	}
	v := 0.0
	if connected {
		v = 1
	}
	m.Connected.WithLabelValues(cluster).Set(v)
}

func (m *Metrics) connectionError(cluster string, reason Reason) {
	if m == nil {
		return
	}
	m.ConnectionErrors.WithLabelValues(cluster, string(reason)).Inc()
}

func (m *Metrics) request(verb, resource, code string, seconds float64, observe bool) {
	if m == nil {
		return
	}
	m.Requests.WithLabelValues(verb, resource, code).Inc()
	if observe {
		m.RequestDuration.WithLabelValues(verb, resource).Observe(seconds)
	}
}

// timedLimiter records how long requests wait in a spoke's token bucket.
type timedLimiter struct {
	flowcontrol.RateLimiter
	m *Metrics
}

func (t timedLimiter) Wait(ctx context.Context) error {
	start := time.Now()
	err := t.RateLimiter.Wait(ctx)
	if t.m != nil {
		t.m.RateLimiterWait.Add(time.Since(start).Seconds())
	}
	return err
}

func (m *Metrics) refused(verb string) {
	if m == nil {
		return
	}
	m.RequestsRefused.WithLabelValues(verb).Inc()
}

func (m *Metrics) forget(cluster string) {
	if m == nil {
		return
	}
	m.Connected.DeleteLabelValues(cluster)
	m.ConnectionErrors.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
}
