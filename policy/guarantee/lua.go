package guarantee

import "strconv"

// LuaUpdate defines, in a Redis script, the Lua functions
//
//	guarantee_update(state, agree, target, threshold, max_bet, gain)
//	guarantee_fresh(target)
//
// guarantee_update takes a stored state (false or "" for a group never
// seen), agree a boolean and the monitor's numbers from LuaArgs (as
// numbers), and returns the new state string and whether this observation
// raised the alarm. It is Update step by step; a script embeds it before
// its own code.
var LuaUpdate = `
local function guarantee_fmt(v) return string.format('%.17g', v) end
local function guarantee_fresh(target)
  return guarantee_fmt(target) .. ' 0 0 1 0 1 0'
end
local function guarantee_update(state, agree, target, threshold, max_bet, gain)
  local t, n, k, ev, bet, curv, alarm = target, 0, 0, 1, 0, 1, '0'
  if state and state ~= '' then
    local f = {}
    for w in string.gmatch(state, '%S+') do f[#f + 1] = w end
    t, n, k, ev, bet, curv, alarm = tonumber(f[1]), tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), tonumber(f[6]), f[7]
  end
  if t ~= target then
    t, n, k, ev, bet, curv = target, 0, 0, 1, 0, 1
  end
  local x = 0
  if agree then x = 1; k = k + 1 end
  n = n + 1
  local y = target - x
  local f = 1 + bet * y
  ev = ev * f
  if ev > 1e300 then ev = 1e300 end
  local z = y / f
  curv = curv + z * z
  bet = bet + gain * z / curv
  if bet < 0 then bet = 0 elseif bet > max_bet then bet = max_bet end
  local raised = false
  if alarm == '0' and ev >= threshold then alarm = '1'; raised = true end
  return guarantee_fmt(t) .. ' ' .. string.format('%d', n) .. ' ' .. string.format('%d', k) .. ' ' ..
    guarantee_fmt(ev) .. ' ' .. guarantee_fmt(bet) .. ' ' .. guarantee_fmt(curv) .. ' ' .. alarm, raised
end
`

// LuaArgs are p's numbers as a script passes them to guarantee_update:
// target, threshold, max_bet and gain, each written so that Lua's tonumber
// reads the float64 Go holds.
func LuaArgs(p Params) []string {
	return []string{
		strconv.FormatFloat(p.Target, 'g', -1, 64),
		strconv.FormatFloat(p.Threshold(), 'g', -1, 64),
		strconv.FormatFloat(p.maxBet(), 'g', -1, 64),
		strconv.FormatFloat(onsGain, 'g', -1, 64),
	}
}
