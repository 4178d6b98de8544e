package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Plan fixes, before labelling begins, the one look of a `uniform`
// calibration of a group: its number of entries. The review API stores it
// (PUT /plans) with the time it was stored by its own clock, refuses it
// once the group's (model, type) has a label, and never changes it; `GET
// /plans` lists the plans. `calibrate --method uniform --plan` takes
// exactly Entries entries of the group's complete prefix, and `verify`
// checks a uniform certificate against its plan: stored before the
// group's first label, and the look at exactly that many entries.
type Plan struct {
	// Model, Type, Question and Org name the group: Question "" for a
	// type group, Org "" for a pooled one.
	Model    string `json:"model"`
	Type     string `json:"type"`
	Question string `json:"question"`
	Org      string `json:"org"`
	// Entries is the number of audited entries the look takes.
	Entries int `json:"entries"`
	// Created is when the review API stored the plan, RFC 3339 UTC.
	Created string `json:"created"`
}

// Plans is the document GET /plans answers.
type Plans struct {
	Plans []Plan `json:"plans"`
}

// Key is the plan's group, as one string: model, type, question and org
// joined by a unit separator.
func (p Plan) Key() string { return PlanKey(p.Model, p.Type, p.Question, p.Org) }

// PlanKey names a group as Plan.Key does.
func PlanKey(model, typ, question, org string) string {
	return model + "\x1f" + typ + "\x1f" + question + "\x1f" + org
}

// CreatedAt reads Created.
func (p Plan) CreatedAt() (time.Time, error) { return time.Parse(time.RFC3339Nano, p.Created) }

// Check reports what is wrong with a plan as stored: a model and a type,
// at least one entry, a creation time.
func (p Plan) Check() error {
	switch {
	case p.Model == "" || p.Type == "":
		return errors.New("a plan names its model and type")
	case p.Entries < 1:
		return fmt.Errorf("plan of %s %s: entries %d, want at least 1", p.Model, p.Type, p.Entries)
	}
	if _, err := p.CreatedAt(); err != nil {
		return fmt.Errorf("plan of %s %s: created %q is not an RFC 3339 time", p.Model, p.Type, p.Created)
	}
	return nil
}

// ParsePlans reads a GET /plans document, each plan checked, no group
// planned twice.
func ParsePlans(raw []byte) ([]Plan, error) {
	var doc Plans
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("not a /plans document: %v", err)
	}
	seen := map[string]bool{}
	for _, p := range doc.Plans {
		if err := p.Check(); err != nil {
			return nil, err
		}
		if seen[p.Key()] {
			return nil, fmt.Errorf("two plans of %s %s", p.Model, p.Type)
		}
		seen[p.Key()] = true
	}
	return doc.Plans, nil
}
