package route

// AlarmStatus reports how the router follows the guarantee alarms, for a
// readiness check: watched is false without `on_alarm human` (there is
// nothing to follow). Otherwise problem is "" while the latest read of the
// alarm set succeeded; else it says whether the set was never read (every
// question routes human, guarantee_unknown), was read but is held while
// lost alarms are written back (the same), or the latest read failed (the
// last set read stays in force), and why. A few atomic loads.
func (r *Router) AlarmStatus() (watched bool, problem string) {
	if r == nil || r.alarmProblem == nil {
		return false, ""
	}
	return true, r.alarmProblem()
}
