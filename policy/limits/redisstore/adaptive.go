package redisstore

import "github.com/systemone/systemone-gateway/policy/limits/store"

// MinLeaseAdmissions is how many admissions a lease must be able to pay,
// and an organization must have made on this instance within one interval,
// before the adaptive mode leases its buckets (LeaseOptions.Adaptive): a
// lease call then stands in for at least that many exact admissions. Below
// it, a lease would save little and its overshoot would be a large part
// of a small limit, so the organization is admitted exactly.
const MinLeaseAdmissions = 8

// pace counts one organization's admissions on this instance in windows of
// one interval, for the adaptive mode: the window under way and the one
// before it.
type pace struct {
	start       int64 // µs: when the window under way began
	count, prev int64 // admissions in it, and in the window before
}

// note counts an admission at now (µs) in windows of interval µs.
func (p *pace) note(now, interval int64) {
	switch {
	case now >= p.start+2*interval:
		p.start, p.count, p.prev = now, 0, 0
	case now >= p.start+interval:
		p.start, p.count, p.prev = p.start+interval, 0, p.count
	}
	p.count++
}

// fast reports whether the organization made at least MinLeaseAdmissions
// admissions within the window under way or the one before it: at that
// pace, a lease is spent by several admissions before it expires.
func (p *pace) fast() bool { return p.count >= MinLeaseAdmissions || p.prev >= MinLeaseAdmissions }

// recent reports whether a window counted at now is still read: the
// sweeper keeps the entry meanwhile.
func (p *pace) recent(now, interval int64) bool { return p.start != 0 && now < p.start+2*interval }

// leasable reports whether the adaptive mode may pay c from a lease: each
// bucket c debits gives slices (share of its capacity) of at least
// MinLeaseAdmissions times c's cost. A small limit (a requests slice under
// 8 requests: requests_per_minute under 400 at a 2% share) or a request
// large against the token slice is admitted exactly.
func (ls *Leases) leasable(c store.Check) bool {
	rslice, tslice := ls.adaptiveSlices(c)
	if c.UsesReq() && rslice < MinLeaseAdmissions*max(c.ReqCost, 1) {
		return false
	}
	if c.UsesTok() && tslice < MinLeaseAdmissions*max(c.TokCost, 1) {
		return false
	}
	return true
}

// adaptiveSlices are the slices of the adaptive mode: share of each
// bucket's capacity, with no floor (leasable refuses a slice too small).
func (ls *Leases) adaptiveSlices(c store.Check) (req, tok int64) {
	if c.Req.On() {
		req = int64(ls.share * float64(c.Req.Capacity))
	}
	if c.Tok.On() {
		tok = int64(ls.share * float64(c.Tok.Capacity))
	}
	return req, tok
}
