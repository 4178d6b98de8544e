package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"sync"
)

// layout is the version of the key's and the entry's layout: a new layout
// gets a new number, so that no instance ever reads an entry another
// layout wrote (its keys differ).
const layout = 1

// Answer is an upstream's answer to an evaluation request, as the client
// got it: what the cache stores and a hit carries.
type Answer struct {
	Status int
	// ContentType and ContentEncoding are the answer's headers; the body is
	// in its content coding, as the upstream sent it.
	ContentType, ContentEncoding string
	// RequestID is the upstream's x-request-id.
	RequestID string
	Body      []byte
}

// hashers recycles the SHA-256 state of Key.
var hashers = sync.Pool{New: func() any { return sha256.New() }}

// Key is the cache key of an evaluation request: the hex SHA-256 of the
// layout, the org (its length first, so that no org and body can pass for
// another org and body) and the body's exact bytes as received. The
// requested model is part of the body: another version is another key.
func Key(org string, body []byte) string {
	return keyOf(layout, org, body)
}

func keyOf(version byte, org string, body []byte) string {
	h := hashers.Get().(hash.Hash)
	defer hashers.Put(h)
	h.Reset()
	var head [1 + binary.MaxVarintLen64]byte
	head[0] = version
	n := binary.PutUvarint(head[1:], uint64(len(org)))
	h.Write(head[:1+n])
	h.Write([]byte(org))
	h.Write(body)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// encode lays out an entry: the layout byte, the status, then the org and
// the headers each after its length, then the body to the end. The org is
// stored so that a lookup can check it: an entry is never answered to
// another org, even if two keys collided.
func encode(org string, a Answer) []byte {
	size := 1 + 5*binary.MaxVarintLen64 + len(org) + len(a.ContentType) + len(a.ContentEncoding) + len(a.RequestID) + len(a.Body)
	b := make([]byte, 0, size)
	b = append(b, layout)
	b = binary.AppendUvarint(b, uint64(a.Status))
	for _, s := range []string{org, a.ContentType, a.ContentEncoding, a.RequestID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return append(b, a.Body...)
}

var errCorrupt = errors.New("cache entry: not an entry of this layout")

// decode reads an entry that encode laid out. The answer's body shares
// data's bytes.
func decode(data []byte) (org string, a Answer, err error) {
	if len(data) == 0 || data[0] != layout {
		return "", Answer{}, errCorrupt
	}
	data = data[1:]
	status, n := binary.Uvarint(data)
	if n <= 0 || status < 100 || status > 999 {
		return "", Answer{}, errCorrupt
	}
	data = data[n:]
	var fields [4]string
	for i := range fields {
		l, n := binary.Uvarint(data)
		if n <= 0 || l > uint64(len(data)-n) {
			return "", Answer{}, errCorrupt
		}
		fields[i] = string(data[n : n+int(l)])
		data = data[n+int(l):]
	}
	return fields[0], Answer{Status: int(status), ContentType: fields[1], ContentEncoding: fields[2], RequestID: fields[3], Body: data}, nil
}
