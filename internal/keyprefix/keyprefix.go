// Package keyprefix is the one rule for the `key_prefix` option that the
// `systemone` gateway and the `systemone_review` handler share: the string
// every Redis key they keep starts with.
//
// Both handlers put a Redis Cluster hash tag of their own in each key: the
// gateway the organization ({<org>}, so each org's buckets and budget live
// in one slot and the orgs spread over the cluster), the review handler the
// stream ({<stream>}, so a label write is one transaction). A brace in the
// prefix would come first in the key and take that place: a tag such as
// {a} would put every organization in one slot, an empty {} would make
// Redis hash each whole key and scatter one transaction over several
// slots. So a prefix holds neither '{' nor '}', whichever handler reads it,
// and one prefix is valid for both.
package keyprefix

import (
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// Default is the prefix an unset (or empty, once its placeholders are
// resolved) key_prefix stands for.
const Default = "systemone:"

// Check refuses a resolved prefix that holds '{' or '}'.
func Check(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("key_prefix %q: must not contain { or }: the keys carry their own Redis Cluster hash tag", prefix)
	}
	return nil
}

// Resolve returns the prefix that key_prefix as written stands for:
// placeholders such as {env.NAME} resolved by repl (unknown ones read as
// empty), Default when that leaves nothing, checked by Check.
func Resolve(repl *caddy.Replacer, written string) (string, error) {
	prefix := repl.ReplaceAll(written, "")
	if prefix == "" {
		prefix = Default
	}
	return prefix, Check(prefix)
}
