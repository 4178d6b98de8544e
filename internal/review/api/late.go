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
		l, err := record.ParseLabel([]byte(text))
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

// lateField is a late correction's count field: model, type and org.
func lateField(model, typ, org string) string { return model + "\x1f" + typ + "\x1f" + org }

// putLate keeps a late correction's records apart and counts them, in
// one transaction (the keys share the stream's hash tag).
func (s *store) putLate(ctx context.Context, id record.ID, lines []record.Label) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, l := range lines {
			b, err := l.Marshal()
			if err != nil {
				return err
			}
			p.HSet(ctx, s.lateEntryKey(id.String()), l.Question, string(b))
			p.HIncrBy(ctx, s.lateKey(), lateField(l.Model, l.Type, l.Org), 1)
		}
		return nil
	})
	return err
}

// lateCounts reads the late corrections counted so far: (model, type,
// org) -> count.
func (s *store) lateCounts(ctx context.Context) (map[[3]string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	raw, err := s.client.HGetAll(ctx, s.lateKey()).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[[3]string]int, len(raw))
	for field, v := range raw {
		parts := strings.SplitN(field, "\x1f", 3)
		n, err := strconv.Atoi(v)
		if len(parts) != 3 || err != nil {
			continue
		}
		out[[3]string{parts[0], parts[1], parts[2]}] += n
	}
	return out, nil
}

// lateFor sums the counts of a group: its model and type, and its org for
// an org group (every org for a pooled or question group).
func lateFor(counts map[[3]string]int, model, typ, org string) int {
	n := 0
	for k, c := range counts {
		if k[0] == model && k[1] == typ && (org == "" || k[2] == org) {
			n += c
		}
	}
	return n
}
