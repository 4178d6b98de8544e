package guarantee

import "strings"

// Redis layout
//
// The review handler keeps, next to its labels (all under the one Redis
// Cluster hash tag of the review stream, so that a label and the
// observation it makes are written by one script):
//
//	<prefix>review:{<stream>}:guarantee   hash: group -> State (Encode's form)
//	<prefix>review:{<stream>}:alarms      set: the groups in alarm
//
// where a group is written "<type>:<model>" (a type never holds ':', a
// model may). The gateway knows its key_prefix and its queue's stream, so
// it reads the alarm set under the same name, with SMEMBERS, on a timer.

// StateKey is the hash of every group's state for the review stream.
func StateKey(prefix, stream string) string { return base(prefix, stream) + "guarantee" }

// AlarmKey is the set of the groups in alarm for the review stream.
func AlarmKey(prefix, stream string) string { return base(prefix, stream) + "alarms" }

func base(prefix, stream string) string { return prefix + "review:{" + stream + "}:" }

// Group is a (model, question type) pair.
type Group struct {
	Model, Type string
}

// Member is g as the state hash and the alarm set name it.
func (g Group) Member() string { return g.Type + ":" + g.Model }

// ParseMember reads a Member; ok is false when m has no ':'.
func ParseMember(m string) (Group, bool) {
	typ, model, ok := strings.Cut(m, ":")
	return Group{Model: model, Type: typ}, ok
}
