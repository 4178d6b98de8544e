package ttlstore

import "context"

// Tiered is a store in front of another: an in-process store before the
// shared one, so that a hot value costs no round trip. A value read from
// back is kept in front; a value set goes to both. Front keeps its own time
// to live, counted from when it took the value: a codec whose values must
// not outlive the shared store's time to live writes the time it made them
// into the value and checks it on reading (the verdict cache does).
type Tiered struct {
	Front, Back Store
}

// Get returns what front holds and asks back for the rest only, in one
// round trip.
func (t Tiered) Get(ctx context.Context, keys ...string) [][]byte {
	values := t.Front.Get(ctx, keys...)
	var missing []string
	for i, v := range values {
		if v == nil {
			missing = append(missing, keys[i])
		}
	}
	if len(missing) == 0 {
		return values
	}
	found := t.Back.Get(ctx, missing...)
	var kept []Entry
	j := 0
	for i, v := range values {
		if v != nil {
			continue
		}
		if found[j] != nil {
			values[i] = found[j]
			kept = append(kept, Entry{Key: keys[i], Value: found[j]})
		}
		j++
	}
	if len(kept) > 0 {
		t.Front.Set(ctx, kept...)
	}
	return values
}

// Set stores the entries in front and in back.
func (t Tiered) Set(ctx context.Context, entries ...Entry) {
	t.Front.Set(ctx, entries...)
	t.Back.Set(ctx, entries...)
}

// Delete removes the keys from front and from back.
func (t Tiered) Delete(ctx context.Context, keys ...string) {
	t.Front.Delete(ctx, keys...)
	t.Back.Delete(ctx, keys...)
}
