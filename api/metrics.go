package api

import (
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the API's Prometheus series, registered on the server's own
// registry (no package globals).
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	claims       *prometheus.CounterVec
	claimLatency prometheus.Histogram
	claimWaiters prometheus.Gauge
	gateLooks    *prometheus.CounterVec
	gateTurns    prometheus.Counter
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_http_requests_total", Help: "HTTP requests by method, route and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "taskservice_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60},
		}, []string{"method", "route"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_claims_total", Help: "Claim calls by outcome: claimed, empty, error (the database failed the claim).",
		}, []string{"outcome"}),
		claimLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "taskservice_claim_duration_seconds", Help: "Time to run one claim against the database.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, 1},
		}),
	}
	m.claimWaiters = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "taskservice_claim_waiters", Help: "Long-poll claims waiting for a task on this instance.",
	})
	m.gateLooks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "taskservice_claim_gate_looks_total",
		Help: "The claim gate's reads of what waiting long-polls could claim, by outcome: some, none, error (then every waiter claims); skipped counts completions' wakes that needed no read.",
	}, []string{"outcome"})
	m.gateTurns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "taskservice_claim_gate_turns_total", Help: "Waiting long-polls the claim gate let claim.",
	})
	reg.MustRegister(m.requests, m.duration, m.claims, m.claimLatency, m.claimWaiters, m.gateLooks, m.gateTurns)
	_ = reg.Register(collectors.NewGoCollector())
	_ = reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() echo.HandlerFunc {
	return echo.WrapHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}
