package api

import (
	"context"

	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/review/monitor"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// takenByMonitor reports whether the monitor has taken entry id as an
// observation.
func (s *store) takenByMonitor(ctx context.Context, id string) (bool, error) {
	parsed, ok := record.ParseID(id)
	if !ok {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.client.SIsMember(ctx, monitor.LuaKeys(s.base)[6], indexMember(parsed)).Result()
}

// correctMonitor hands the monitor the late labels of entry id that feed
// it (audited, routed auto): a correction to a disagreement of an answer
// the monitor counted as agreeing moves its group's evidence, at the bet
// the entry was taken at (monitor.Correct: alpha holds whatever the
// corrections), so that a failure found late is still seen. It returns
// how many groups moved.
func (h *Handler) correctMonitor(ctx context.Context, id record.ID, lines []questionLines) (int, error) {
	if h.monitor == nil {
		return 0, nil
	}
	var labels []monitor.LateLabel
	for _, ql := range lines {
		// The answer the client got routed auto is the one observed: the
		// second version's for an escalated question.
		if l := ql.observed(); l != nil && !l.Agree {
			labels = append(labels, monitor.LateLabel{Question: l.Question, Agree: false})
		}
	}
	updates, err := h.store.monitor.Correct(ctx, indexMember(id), h.monitor.params, labels)
	h.observed(updates)
	for _, u := range updates {
		if ce := h.logger.Check(zap.WarnLevel, "late correction to a disagreement applied to the guarantee monitor"); ce != nil {
			ce.Write(zap.String("entry", id.String()), zap.String("model", u.Group.Model), zap.String("type", u.Group.Type),
				zap.String("org", u.Group.Org), zap.Float64("evidence", u.State.Evidence), zap.Bool("alarm", u.State.Alarm),
				zap.String("stream", h.store.stream))
		}
	}
	return len(updates), err
}
