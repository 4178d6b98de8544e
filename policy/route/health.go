package route

// AlarmStatus reports how the router follows the guarantee alarms, for a
// readiness check: watched is false without `on_alarm human` (there is
// nothing to follow). Otherwise problem is "" while the latest read of the
// alarm set succeeded; else it says whether the set was never read (every
// question routes human, guarantee_unknown), was read but is held while
// lost alarms are written back (the same), or the latest read failed (the
// last set read stays in force), and why. A few atomic loads.
func (r *Router) AlarmStatus() (watched bool, problem string) {
	if r == nil || r.alarms == nil {
		return false, ""
	}
	w := r.alarms
	err := w.readErr.Load()
	switch {
	case !w.known.Load() && err != nil:
		return true, "never read: " + *err
	case !w.known.Load():
		// Read, but held: the gateways that kept alarms Redis lost have
		// not yet had the time to write them back.
		return true, "not yet known: waiting for lost alarms to be written back"
	case err != nil:
		return true, "stale, the latest read failed: " + *err
	}
	return true, ""
}
