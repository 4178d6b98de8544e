package limits

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// live holds the limiters not yet closed (during a reload, the old
// config's and the new one's), read at scrape time.
var live sync.Map // *Limiter -> struct{}

// The limiters' metrics.
var (
	redisUpDesc = prometheus.NewDesc("systemone_redis_up",
		"1 while the rate limiter's Redis answers, 0 from the moment the limiter counts a Redis server (on a cluster, a master) lost (3 consecutive failures) until every lost one's keyed probe sees it serve again. Absent when no limiter uses Redis.",
		nil, nil)
	leasesDesc = prometheus.NewDesc("systemone_limit_leases_total",
		"Lease calls to Redis that granted a slice of an organization's buckets (the adaptive allowance, or local_allowance).",
		nil, nil)
	settlementsPendingDesc = prometheus.NewDesc("systemone_limit_settlements_pending",
		"Settlements and holds waiting for Redis (one per organization and kind): queued, or sent and not yet answered. Near 0 while Redis answers; it grows while Redis is lost, and past 100,000 queued new ones are dropped.",
		nil, nil)
	settlementsLostDesc = prometheus.NewDesc("systemone_limit_settlements_lost_total",
		"Settlements, holds and lease give-backs Redis may not have applied: dropped (never sent: Redis lost and the queue full) or unanswered (sent, the answer lost and not had within the minute a settlement is sent again with its id, so the script may have run; not sent again). One Redis refused before it ran is queued again, not counted.",
		[]string{"reason"}, nil)
)

// Collector reports the limiters' metrics: systemone_redis_up is 0 when any
// limiter not yet closed counts its Redis as lost; the settlements pending
// add up those limiters' queues; the counters are the process's
// (ProcessStats), so they keep counting across reloads, what a closed
// limiter still sends or drops included. All are absent while no limiter
// has used Redis.
func Collector() prometheus.Collector { return collector{} }

type collector struct{}

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- redisUpDesc
	ch <- settlementsPendingDesc
	ch <- leasesDesc
	ch <- settlementsLostDesc
}

func (collector) Collect(ch chan<- prometheus.Metric) {
	up, used, pending := 1.0, false, int64(0)
	live.Range(func(k, _ any) bool {
		l := k.(*Limiter)
		ok, uses := l.RedisUp()
		if uses {
			used = true
			if !ok {
				up = 0
			}
			pending += l.Stats().Pending
		}
		return true
	})
	total := ProcessStats()
	if !used && total == (Stats{}) {
		return
	}
	if used {
		ch <- prometheus.MustNewConstMetric(redisUpDesc, prometheus.GaugeValue, up)
		ch <- prometheus.MustNewConstMetric(settlementsPendingDesc, prometheus.GaugeValue, float64(pending))
	}
	ch <- prometheus.MustNewConstMetric(leasesDesc, prometheus.CounterValue, float64(total.LeasesTaken))
	ch <- prometheus.MustNewConstMetric(settlementsLostDesc, prometheus.CounterValue, float64(total.SettlementsDropped), "dropped")
	ch <- prometheus.MustNewConstMetric(settlementsLostDesc, prometheus.CounterValue, float64(total.SettlementsUnanswered), "unanswered")
}
