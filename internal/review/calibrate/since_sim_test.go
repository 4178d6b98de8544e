package calibrate_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/review/monitor"
)

// After a guarantee alarm: a regime shift makes the threshold in force
// wrong, the monitor (its Go arithmetic, the same bits as its Lua) raises
// the alarm, the team labels the audited entries queued after it and
// recalibrates with --since <raised_at>. The simulation's premise: the
// traffic after the shift stays in its new regime. Entries queued after
// the alarm played no part in raising it (the monitor takes entries in
// order, and had taken only older ones), so whatever the moment the alarm
// chose, they are a fresh sample of the new regime, and the calibration's
// guarantee holds for it.

// One question per entry, confidence uniform on [0, 1]; target 0.9.
const (
	shiftTarget = 0.9
	shiftDelta  = 0.05
)

// agreeOld and agreeNew are the chance that an answer at confidence c
// agrees with a person, before and after the shift: after it, answers
// between 0.5 and 0.7 agree far less.
func agreeOld(c float64) float64 {
	if c >= 0.5 {
		return 0.97
	}
	return 0.6
}

func agreeNew(c float64) float64 {
	switch {
	case c >= 0.7:
		return 0.99
	case c >= 0.5:
		return 0.7
	}
	return 0.6
}

// agreementAbove is the agreement of the answers at or above t under
// agree, confidence uniform: the integral of agree over [t, 1] over 1 - t,
// the function being piecewise constant with breaks at 0.5 and 0.7.
func agreementAbove(agree func(float64) float64, t float64) float64 {
	if t >= 1 {
		return agree(1)
	}
	cuts := []float64{t}
	for _, b := range []float64{0.5, 0.7} {
		if b > t {
			cuts = append(cuts, b)
		}
	}
	cuts = append(cuts, 1)
	sum := 0.0
	for i := 0; i+1 < len(cuts); i++ {
		sum += (cuts[i+1] - cuts[i]) * agree(cuts[i])
	}
	return sum / (1 - t)
}

// shiftLife is one life of a group: calibrated on the old regime, shifted,
// alarmed, relabelled.
type shiftLife struct {
	old                 float64 // the threshold calibrated on the old regime
	alarmed             bool
	since, all          calibrate.Group
	afterAlarm, entries int
}

// simulateShift runs one life, the monitor and the calibrations at the
// product's defaults (anytime, one question per entry).
func simulateShift(seed uint64) shiftLife {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var lines []calibrate.Line
	// Entries a second apart: the stream's id is the time it was queued.
	add := func(agree func(float64) float64, threshold float64, routing bool) calibrate.Line {
		n := len(lines)
		c := rng.Float64()
		queued := base.Add(time.Duration(n) * time.Second)
		l := calibrate.Line{Model: "m", Type: "noul", Question: "q", Confidence: c, HasConfidence: true,
			Agree: rng.Float64() < agree(c), Audit: true, Auto: routing && c >= threshold,
			Entry:     calibrate.EntryID{Ms: uint64(queued.UnixMilli()), Set: true},
			RequestID: fmt.Sprint("r", n), Labelled: queued.Add(time.Hour).UnixNano()}
		lines = append(lines, l)
		return l
	}
	opts := calibrate.DefaultOptions()
	opts.Target, opts.Delta, opts.MaxQuestions, opts.CorrectWithin, opts.Expect = shiftTarget, shiftDelta, 1, 0, false
	opts.AsOf = base.Add(1000 * time.Hour)

	// The old regime: 1,500 audited entries give the threshold in force.
	for range 1500 {
		add(agreeOld, 1, false)
	}
	res, _ := calibrate.Calibrate(lines, opts)
	var life shiftLife
	if g := res.Groups[0]; g.HasThreshold {
		life.old = g.Threshold
	} else {
		life.old = 1
	}
	// The shift. The monitor observes the auto answers (one question per
	// entry, max_questions 1) until it alarms.
	p := monitor.Params{Target: shiftTarget, Alpha: 0.05, MaxQuestions: 1}
	state := monitor.Fresh(shiftTarget)
	var raisedAt time.Time
	for range 4000 {
		l := add(agreeNew, life.old, true)
		if !l.Auto {
			continue
		}
		agree := int64(0)
		if l.Agree {
			agree = 1
		}
		var raised bool
		if state, raised = monitor.Update(p, state, agree, 1); raised {
			// Taken once labelled and settled: 40 entries (seconds)
			// after it was queued, later ones queued meanwhile.
			raisedAt = time.UnixMilli(int64(l.Entry.Ms)).Add(40*time.Second + 500*time.Millisecond)
			life.alarmed = true
			break
		}
	}
	if !life.alarmed {
		return life
	}
	// Traffic goes on, routed human (on_alarm human), still audited; the
	// team labels the 1,200 entries queued after the alarm.
	for len(lines) == 0 || time.UnixMilli(int64(lines[len(lines)-1].Entry.Ms)).Before(raisedAt.Add(1200*time.Second)) {
		add(agreeNew, 1, false)
	}
	life.entries = len(lines)
	since, err := calibrate.ParseSince(raisedAt.Format(time.RFC3339Nano)) // /guarantee's raised_at, as the docs paste it
	if err != nil {
		panic(err)
	}
	for _, l := range lines {
		if l.Entry.Compare(since) >= 0 {
			life.afterAlarm++
		}
	}
	opts.Since = since
	res, _ = calibrate.Calibrate(lines, opts)
	life.since = res.Groups[0]
	opts.Since = calibrate.EntryID{}
	res, _ = calibrate.Calibrate(lines, opts)
	life.all = res.Groups[0]
	return life
}

// wrong reports whether g's threshold has agreement below the target in
// the new regime.
func wrong(g calibrate.Group) bool {
	return g.HasThreshold && agreementAbove(agreeNew, g.Threshold) < shiftTarget
}

// TestSinceAfterAlarmKeepsTheGuarantee: over 200 lives, calibrating with
// --since <raised_at> gives a threshold wrong for the new regime in at
// most delta + 3 SE of them, while the same calibration over all labels
// gives back a threshold the shift made wrong in most.
func TestSinceAfterAlarmKeepsTheGuarantee(t *testing.T) {
	simulationOnly(t)
	const lives = 200
	var alarmed, sinceWrong, sinceFound, allWrong, miscounted int
	var olds, sinceThresholds, allThresholds []float64
	for i := range lives {
		life := simulateShift(uint64(i))
		if !life.alarmed {
			continue
		}
		alarmed++
		olds = append(olds, life.old)
		if life.since.Labels != life.afterAlarm || life.afterAlarm < 1000 {
			if miscounted++; miscounted == 1 {
				t.Errorf("life %d: --since counted %d labels, %d entries were queued after the alarm", i, life.since.Labels, life.afterAlarm)
			}
		}
		if life.since.HasThreshold {
			sinceFound++
			sinceThresholds = append(sinceThresholds, life.since.Threshold)
		}
		if wrong(life.since) {
			sinceWrong++
		}
		if wrong(life.all) {
			allWrong++
			allThresholds = append(allThresholds, life.all.Threshold)
		}
	}
	// The shift makes the old threshold wrong, and the monitor sees it.
	if agreementAbove(agreeNew, median(olds)) >= shiftTarget || alarmed < lives*95/100 {
		t.Fatalf("the scenario does not alarm: %d of %d lives, old threshold %.2f", alarmed, lives, median(olds))
	}
	rate := float64(sinceWrong) / float64(alarmed)
	se := math.Sqrt(shiftDelta * (1 - shiftDelta) / float64(alarmed))
	t.Logf("%d lives alarmed; old threshold median %.2f (agreement %.3f after the shift); with --since: threshold in %d, median %.2f, wrong in %d (%.3f, bound %.3f); all labels: wrong in %d, median %.2f",
		alarmed, median(olds), agreementAbove(agreeNew, median(olds)), sinceFound, median(sinceThresholds), sinceWrong, rate, shiftDelta+3*se, allWrong, median(allThresholds))
	if rate > shiftDelta+3*se {
		t.Errorf("with --since, %d of %d thresholds wrong for the new regime (%.3f > delta + 3 SE = %.3f)", sinceWrong, alarmed, rate, shiftDelta+3*se)
	}
	// Not vacuous: the labels after the alarm do give thresholds.
	if sinceFound < alarmed*2/3 {
		t.Errorf("with --since, a threshold in only %d of %d lives", sinceFound, alarmed)
	}
	// Without --since the labels before the alarm outweigh the new ones:
	// the alarmed threshold, or one as wrong, comes back.
	if allWrong < alarmed/2 {
		t.Errorf("over all labels only %d of %d thresholds wrong: the scenario does not show what --since is for", allWrong, alarmed)
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
