package monitor

import (
	"net/url"
	"strings"
)

// Redis layout
//
// The review handler keeps, next to its labels (all under the one Redis
// Cluster hash tag of the review stream, so that a label and the
// observation it makes are written by one script):
//
//	<prefix>review:{<stream>}:guarantee   hash: group -> State (Encode's form)
//	<prefix>review:{<stream>}:guarantee:raised_at
//	                                      hash: group in alarm -> when raised (Unix ms)
//	<prefix>review:{<stream>}:guarantee:reset_at
//	                                      hash: group -> its last reset (Unix ms)
//	<prefix>review:{<stream>}:guarantee:refused
//	                                      hash: group -> entries refused (max_questions)
//	<prefix>review:{<stream>}:alarms      set: the groups in alarm
//	<prefix>review:{<stream>}:resets      hash: group -> token of its last reset
//	<prefix>review:{<stream>}:pending     sorted set, all scores 0: the entries
//	                                      awaiting their observation, in entry order
//	<prefix>review:{<stream>}:due         hash: pending entry -> when it is taken (Unix ms)
//	<prefix>review:{<stream>}:obs:<id>    hash: a pending entry's observation so far
//	<prefix>review:{<stream>}:taken       set: the entries already observed
//	<prefix>review:{<stream>}:seen        set: the (model, request id, question)
//	                                      triples already counted
//	<prefix>review:{<stream>}:guarantee:refused  hash: group -> entries refused
//	                                      (more questions than max_questions)
//	<prefix>review:{<stream>}:taken:obs   hash: taken entry -> what it was observed
//	                                      with, for late corrections (correct.go)
//
// where a group is written "<type>:<model>", or under `by org`
// "<type>@<org, query-escaped>:<model>", and an escalated group (the second
// answers of questions an `escalate` block asked again) with
// "^<first version, query-escaped>" after the type and org:
// "<type>^<first>:<model>", "<type>@<org>^<first>:<model>" (a type never
// holds ':', '@' or '^', an escaped org or version never ':' or '^'; a
// model may hold anything). The gateway knows its
// key_prefix and its queue's stream, so it reads the alarm set and the
// reset tokens under the same names, on a timer.

// StateKey is the hash of every group's state for the review stream.
func StateKey(prefix, stream string) string { return Base(prefix, stream) + "guarantee" }

// AlarmKey is the set of the groups in alarm for the review stream.
func AlarmKey(prefix, stream string) string { return Base(prefix, stream) + "alarms" }

// ResetKey is the hash of each reset group's last reset token: a gateway
// that sees a group leave the alarm set tells a reset (a new token) from
// an alarm lost with Redis's data (no token, or the same one).
func ResetKey(prefix, stream string) string { return Base(prefix, stream) + "resets" }

// Base is the start of every key of the review stream's labels and
// monitor, with the stream as the Redis Cluster hash tag.
func Base(prefix, stream string) string { return prefix + "review:{" + stream + "}:" }

// Group is a (model, question type) pair, or under `by org` a (model,
// type, org) triple; the second answers of escalated questions form groups
// of their own, apart from the same version's answers to the questions it
// was asked first.
type Group struct {
	Model, Type string
	// Org is the organization of a per-org group ("" for requests without
	// one); ByOrg tells a per-org group from a pooled one.
	Org   string
	ByOrg bool
	// EscalatedFrom is, for an escalated group, the first version whose
	// questions an `escalate` block asked Model again; "" for the group of
	// a version's own answers.
	EscalatedFrom string
}

// Member is g as the state hash and the alarm set name it.
func (g Group) Member() string {
	head := g.Type
	if g.ByOrg {
		head += "@" + url.QueryEscape(g.Org)
	}
	if g.EscalatedFrom != "" {
		head += "^" + url.QueryEscape(g.EscalatedFrom)
	}
	return head + ":" + g.Model
}

// ParseMember reads a Member; ok is false when m is not one.
func ParseMember(m string) (Group, bool) {
	head, model, ok := strings.Cut(m, ":")
	if !ok {
		return Group{}, false
	}
	head, from, escalated := strings.Cut(head, "^")
	typ, org, byOrg := strings.Cut(head, "@")
	g := Group{Model: model, Type: typ, ByOrg: byOrg}
	if escalated {
		f, err := url.QueryUnescape(from)
		if err != nil || f == "" {
			return Group{}, false
		}
		g.EscalatedFrom = f
	}
	if byOrg {
		o, err := url.QueryUnescape(org)
		if err != nil {
			return Group{}, false
		}
		g.Org = o
	}
	return g, true
}
