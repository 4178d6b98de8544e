package review

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Content
//
// With include_content the gateway writes each entry's bodies to a content
// stream apart from the review stream (route.ContentStream), and the entry
// names its content entry in the field `content`. Listing and filtering read
// the review stream only, so they never move bodies; the bodies of the items
// actually answered are read afterwards, by id, contentBatch at a time. An
// entry written before that layout holds `request` and `response` inline and
// reads as it always did.

// contentBatch is how many content entries one round trip reads: each is
// at most max_content bytes, so one reply stays bounded.
const contentBatch = 10

// attachContent copies the bodies of each message's content entry into
// its Values as `request` and `response`, as an older entry holds them
// inline. A message without `content`, or whose content entry was trimmed,
// is left as it is.
func (s *store) attachContent(ctx context.Context, msgs []redis.XMessage) error {
	var want []int
	for i, m := range msgs {
		if _, inline := m.Values["request"]; inline {
			continue
		}
		if _, ok := m.Values["content"].(string); ok {
			want = append(want, i)
		}
	}
	for len(want) > 0 {
		n := min(len(want), contentBatch)
		if err := s.readContent(ctx, msgs, want[:n]); err != nil {
			return err
		}
		want = want[n:]
	}
	return nil
}

// readContent reads the content entries of msgs[i] for each i of which,
// in one round trip bounded by the store's timeout.
func (s *store) readContent(ctx context.Context, msgs []redis.XMessage, which []int) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmds := make([]*redis.XMessageSliceCmd, len(which))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range which {
			id := msgs[i].Values["content"].(string)
			cmds[k] = p.XRangeN(ctx, s.content, id, id, 1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for k, i := range which {
		found := cmds[k].Val()
		if len(found) == 0 {
			continue // trimmed before its entry: shown without content
		}
		for _, f := range []string{"request", "response"} {
			if v, ok := found[0].Values[f]; ok {
				msgs[i].Values[f] = v
			}
		}
	}
	return nil
}
