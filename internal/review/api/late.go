package api

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Late corrections
//
// An audited entry is taken as evidence once it is complete: every
// question labelled (or the entry passed) and its newest label at least
// correct_within old. A label PUT after that does not change the evidence
// already taken (calibrate, /progress and the monitor would otherwise see
// a sequence that changes behind them): it is kept apart, under
//
//	<prefix>review:{<stream>}:entry:<entry id>:late   hash: question id -> label record
//
// counted per (model, type, org) in
//
//	<prefix>review:{<stream>}:late                    hash: "<model>\x1f<type>\x1f<org>" -> count
//
// and logged. GET /progress and GET /guarantee report the counts as
// late_corrections. With the monitor on, a late correction to a
// disagreement also reaches the group's evidence (late_monitor.go).

// isLate reports whether a PUT on e, now, corrects an entry already taken
// as evidence: audited, and taken by the monitor, or with every question
// labelled, the newest at least correct_within old (and the monitor's
// settle, when longer).
func (h *Handler) isLate(ctx context.Context, e *record.Entry, now time.Time) (bool, error) {
	if !e.Audit {
		return false, nil
	}
	if h.monitor != nil {
		if taken, err := h.store.takenByMonitor(ctx, e.ID); err != nil || taken {
			return taken, err
		}
	}
	stored, err := h.store.labels(ctx, []string{e.ID})
	if err != nil || len(stored) == 0 {
		return false, err
	}
	var newest time.Time
	for _, q := range e.Questions {
		text, ok := stored[0][q.ID]
		if !ok {
			return false, nil // not complete: the entry is not evidence yet
		}
		l, err := record.ParseLabel([]byte(firstLine(text)))
		if err != nil {
			return false, nil
		}
		at, err := time.Parse(time.RFC3339Nano, l.TS)
		if err != nil {
			return false, nil
		}
		if at.After(newest) {
			newest = at
		}
	}
	window := h.correctWithin()
	if h.monitor != nil {
		// The monitor takes an entry once settle has passed too: until
		// then a correction replaces the label for it as well.
		window = max(window, h.monitor.settle)
	}
	return !newest.IsZero() && now.Sub(newest) >= window, nil
}

func (s *store) lateKey() string               { return s.base + "late" }
func (s *store) lateEntryKey(id string) string { return s.entryKey(id) + ":late" }

// lateGroup is the group a late correction is counted for: model, type,
// org, and the first version of an escalated question's second answer
// ("" for a first answer).
type lateGroup struct{ model, typ, org, escalatedFrom string }

// lateField is a late correction's count field: model, type and org, and
// for an escalated question's second answer its first version, separated
// by 0x1f.
func lateField(g lateGroup) string {
	f := g.model + "\x1f" + g.typ + "\x1f" + g.org
	if g.escalatedFrom != "" {
		f += "\x1f" + g.escalatedFrom
	}
	return f
}

// putLate keeps a late correction's records apart and counts each of
// their lines for its group, in one transaction (the keys share the
// stream's hash tag).
func (s *store) putLate(ctx context.Context, id record.ID, lines []questionLines) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, ql := range lines {
			rec, err := ql.stored()
			if err != nil {
				return err
			}
			p.HSet(ctx, s.lateEntryKey(id.String()), ql[0].Question, rec)
			for _, l := range ql {
				p.HIncrBy(ctx, s.lateKey(), lateField(lateGroup{l.Model, l.Type, l.Org, l.EscalatedFrom}), 1)
			}
		}
		return nil
	})
	return err
}

// lateCounts reads the late corrections counted so far, by group.
func (s *store) lateCounts(ctx context.Context) (map[lateGroup]int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	raw, err := s.client.HGetAll(ctx, s.lateKey()).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[lateGroup]int, len(raw))
	for field, v := range raw {
		parts := strings.SplitN(field, "\x1f", 4)
		n, err := strconv.Atoi(v)
		if len(parts) < 3 || err != nil {
			continue
		}
		g := lateGroup{model: parts[0], typ: parts[1], org: parts[2]}
		if len(parts) == 4 {
			g.escalatedFrom = parts[3]
		}
		out[g] += n
	}
	return out, nil
}

// lateFor sums the counts of a group: its model, type and first version
// ("" for a version's own answers), and its org for an org group (every
// org for a pooled or question group).
func lateFor(counts map[lateGroup]int, want lateGroup) int {
	n := 0
	for g, c := range counts {
		if g.model == want.model && g.typ == want.typ && g.escalatedFrom == want.escalatedFrom && (want.org == "" || g.org == want.org) {
			n += c
		}
	}
	return n
}
