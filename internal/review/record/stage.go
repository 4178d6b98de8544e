package record

// FirstRoute is the route q's first answer gave it: human for a question
// asked again of an `escalate` block's second version (only a question
// its first answer routed human is asked again), else q's route.
func (q *Question) FirstRoute() string {
	if q.Escalated != nil {
		return RouteHuman
	}
	return q.Route
}

// Lines returns the `/labels` lines of question q of e: the line of its
// first answer (stage 1: e's model, q's confidence and answer, the route
// that answer gave it), and for an escalated question the line of its
// second answer beside it (stage 2: the second version's model,
// confidence, answer and route, escalated_from e's model). with holds
// what the lines share beyond the entry and the question: the label,
// reviewer and time, or Pass or Pending; each line's agree is the label's
// against that line's answer.
func (e *Entry) Lines(q *Question, with Label) []Label {
	first := with
	first.Entry, first.RequestID, first.Org, first.Model = e.ID, e.RequestID, e.Org, e.Model
	first.Type, first.Question, first.Confidence, first.Answer = q.Type, q.ID, q.Confidence, q.Answer
	first.Audit, first.AuditP, first.AuditFloor, first.AuditFrom = e.Audit, e.AuditP, e.AuditFloor, e.AuditFrom
	first.Route, first.Stage, first.EscalatedFrom = q.FirstRoute(), StageFirst, ""
	first.Agree = labelled(&first) && Agree(q.Type, first.Label, first.Answer)
	esc := q.Escalated
	if esc == nil {
		return []Label{first}
	}
	second := first
	confidence := esc.Confidence
	second.Model, second.Confidence, second.Answer, second.Route = esc.Model, &confidence, esc.Answer, esc.Route
	second.Stage, second.EscalatedFrom = StageSecond, e.Model
	second.Agree = labelled(&second) && Agree(q.Type, second.Label, second.Answer)
	return []Label{first, second}
}

// labelled reports whether l carries a label: not a pending or passed
// line.
func labelled(l *Label) bool { return !l.Pending && !l.Pass }
