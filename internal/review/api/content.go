package api

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Content
//
// With include_content the gateway writes each entry's bodies to a content
// stream apart from the review stream (record.ContentStream), and the entry
// names its content entry in the field `content`. Listing and filtering read
// the review stream only, so they never move bodies; the bodies of the items
// actually answered are read afterwards, by id, contentBatch at a time.

// contentBatch is how many content entries one round trip reads: each is
// at most max_content bytes, so one reply stays bounded.
const contentBatch = 10

// attachContent reads the bodies of each entry's content entry into it.
// An entry without content, or whose content entry was trimmed, is left as
// it is.
func (s *store) attachContent(ctx context.Context, entries []record.Entry) error {
	var want []*record.Entry
	for i := range entries {
		if entries[i].Content != "" {
			want = append(want, &entries[i])
		}
	}
	for len(want) > 0 {
		n := min(len(want), contentBatch)
		if err := s.readContent(ctx, want[:n]); err != nil {
			return err
		}
		want = want[n:]
	}
	return nil
}

// readContent reads the content entries of entries in one round trip,
// bounded by the store's timeout.
func (s *store) readContent(ctx context.Context, entries []*record.Entry) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmds := make([]*redis.XMessageSliceCmd, len(entries))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, e := range entries {
			cmds[k] = p.XRangeN(ctx, s.content, e.Content, e.Content, 1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for k, e := range entries {
		if found := cmds[k].Val(); len(found) > 0 { // else trimmed before its entry: shown without content
			record.ParseContent(found[0].Values).Apply(e)
		}
	}
	return nil
}
