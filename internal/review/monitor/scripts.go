package monitor

import (
	_ "embed"
	"strconv"
)

// Library defines, in a Redis script, the Lua functions of the monitor.
// A script starts with it, before its own code:
//
//	guarantee_fresh(target)
//	guarantee_update(state, agree, labels, target, alpha, max_bet, gain, maxq)
//	guarantee_note(K, entry, due, request_id, question, member, agree, total, at)
//	guarantee_take(K, now, limit, target, alpha, max_bet, gain, window, horizon, maxq)
//	guarantee_reset(K, member, target, token)
//
// guarantee_update is Update step by step: it takes a stored state (false
// or "" for a group never seen), the entry's agreeing and labelled
// question counts and the monitor's numbers from LuaArgs (as numbers), and
// returns the new state string and whether this observation raised the
// alarm. The other three note a label, take the settled entries and reset
// a group over the Redis layout (keys.go); a test holds them to an
// in-process model of the same bookkeeping. K is the table LuaKeys' keys
// fill, in order: state, alarms, resets, pending, due, obs, taken, seen.
//
//go:embed lua/library.lua
var Library string

// LuaKeys are the keys the Lua functions take as K, in order, for the
// review stream's base (Base): state, alarms, resets, pending, due, obs,
// taken, seen.
func LuaKeys(base string) []string {
	return []string{base + "guarantee", base + "alarms", base + "resets", base + "pending", base + "due", base + "obs", base + "taken", base + "seen"}
}

// LuaArgs are p's numbers as a script passes them to guarantee_update and
// guarantee_take: target, alpha, max_bet and gain, each written so that
// Lua's tonumber reads the float64 Go holds.
func LuaArgs(p Params) []string {
	return []string{
		strconv.FormatFloat(p.Target, 'g', -1, 64),
		strconv.FormatFloat(p.Alpha, 'g', -1, 64),
		strconv.FormatFloat(p.maxBet(), 'g', -1, 64),
		strconv.FormatFloat(onsGain, 'g', -1, 64),
	}
}
