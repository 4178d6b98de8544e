package route

import "time"

// Values of Config.OnAlarm.
const (
	// OnAlarmAlert: a guarantee alarm is the review handler's log entry,
	// metrics and alert; routing goes on as the thresholds say.
	OnAlarmAlert = "alert"
	// OnAlarmHuman: the questions of a group in alarm route human with
	// ReasonGuaranteeAlarm, on every instance sharing the Redis; while an
	// instance has never read the alarms, every question routes human
	// with ReasonGuaranteeUnknown.
	OnAlarmHuman = "human"
)

// onAlarmValues lists the values of Config.OnAlarm, the default first.
var onAlarmValues = []string{OnAlarmAlert, OnAlarmHuman}

// DefaultAlarmRefresh is how often a Router with `on_alarm human` reads the
// set of groups in alarm from Redis (one MULTI of two reads, off the
// request path), unless WithAlarmRefresh says otherwise: an alarm routes
// human on every instance within this period plus one take of the review
// handler (1s) after the observation that raised it, well within the 10
// seconds promised.
const DefaultAlarmRefresh = 2 * time.Second
