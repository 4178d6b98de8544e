package monitor

// The Ledger's late corrections: what guarantee_take keeps of each taken
// entry and what guarantee_correct does with a label given after it.

// keptEntry is a taken entry as the take keeps it: per group, what its
// observation was taken with; per counted question, its agreement then
// (turned false by a late correction) and its group. An entry holds few of
// each: slices beat maps (the simulations keep hundreds of thousands).
type keptEntry struct {
	groups    []keptGroup
	questions []QuestionLabel
}

type keptGroup struct {
	member string
	taking Taking
}

// keep records the observation of group count c of entry e, taken at bet
// in sequence seq.
func (l *Ledger) keep(e string, c groupCount, bet float64, seq int64) {
	k := l.kept[e]
	if k == nil {
		k = &keptEntry{}
		l.kept[e] = k
	}
	taking := Taking{Bet: bet, Sequence: seq, Target: l.Params.Target,
		Agree: c.agree, Labels: c.labels, MaxQuestions: l.Params.MaxQuestions}
	if g := k.group(c.member); g != nil {
		g.taking = taking
	} else {
		k.groups = append(k.groups, keptGroup{member: c.member, taking: taking})
	}
	for _, q := range c.questions {
		if i := k.question(q.Question); i >= 0 {
			k.questions[i] = q
		} else {
			k.questions = append(k.questions, q)
		}
	}
}

func (k *keptEntry) group(member string) *keptGroup {
	for i := range k.groups {
		if k.groups[i].member == member {
			return &k.groups[i]
		}
	}
	return nil
}

func (k *keptEntry) question(id string) int {
	for i := range k.questions {
		if k.questions[i].Question == id {
			return i
		}
	}
	return -1
}

// Correct applies a label of entry's question given after the window:
// a disagreement of a question counted as agreeing moves its group's
// evidence at the bet the entry was taken at; an entry still pending has
// the noted label turned to a disagreement. It returns the group whose
// evidence moved, if any.
func (l *Ledger) Correct(entry string, q QuestionLabel) []Taken {
	if q.Agree {
		return nil
	}
	k := l.kept[entry]
	if k == nil {
		if p := l.pending[entry]; p != nil {
			for i := range p.questions {
				if p.questions[i].Question == q.Question {
					p.questions[i].Agree = false
				}
			}
		}
		return nil
	}
	i := k.question(q.Question)
	if i < 0 || !k.questions[i].Agree {
		return nil
	}
	k.questions[i].Agree = false
	counted := k.questions[i]
	at := &k.group(counted.Member).taking
	taking := *at
	at.Agree--
	if _, has := l.States[counted.Member]; !has && !l.Alarms[counted.Member] {
		return nil
	}
	s, raised := Correct(l.Params, l.state(counted.Member), taking)
	if s == l.state(counted.Member) {
		return nil
	}
	l.States[counted.Member] = s
	if raised {
		l.Alarms[counted.Member] = true
	}
	return []Taken{{Member: counted.Member, State: s, Raised: raised}}
}
