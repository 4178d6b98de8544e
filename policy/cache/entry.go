package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"sync"
	"time"
)

// layout is the version of the keys' and the values' layout: a new layout
// gets a new number, so that no instance ever reads a value another layout
// wrote (its keys differ).
const layout = 2

// Kinds of key, so that no entry key can pass for a key record's.
const (
	kindEntry byte = 'a'
	kindKey   byte = 'k'
)

// keyRecordPrefix starts the store key of a key record, apart from the
// entries' plain hex.
const keyRecordPrefix = "key:"

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
	// Reject is, for an upstream failure the gateway answered itself (a
	// 502 or 504 handed to the requests that waited for it), the
	// gateway's X-Gateway-Reject reason; empty for the upstream's own
	// answer. Nothing stored has one.
	Reject string
}

// Asker is who sends a request, as the cache scopes its entries.
type Asker struct {
	// Scope is the identity mode that named the org (org_header, org_keys,
	// or the key's own fingerprint): the same org name known two ways
	// shares nothing.
	Scope string
	// Org is the organization id.
	Org string
	// KeySum is the SHA-256 of the bearer key; the key itself never
	// reaches the cache.
	KeySum [sha256.Size]byte
}

// hashers recycles the SHA-256 state of the keys.
var hashers = sync.Pool{New: func() any { return sha256.New() }}

// EntryKey is the store key of an evaluation request's entry: the hex
// SHA-256 of the layout, the asker's scope and org (each after its length,
// so that no scope, org and body can pass for others) and the body's exact
// bytes as received. The requested model is part of the body: another
// version is another key.
func EntryKey(scope, org string, body []byte) string {
	return keyOf(layout, kindEntry, scope, org, body)
}

// keyRecordKey is the store key of the record that the upstream accepted
// the asker's key: a hash of the scope, the org and the key's SHA-256,
// never the key.
func keyRecordKey(a Asker) string {
	return keyRecordPrefix + keyOf(layout, kindKey, a.Scope, a.Org, a.KeySum[:])
}

func keyOf(version, kind byte, scope, org string, tail []byte) string {
	h := hashers.Get().(hash.Hash)
	defer hashers.Put(h)
	h.Reset()
	var head [2 + 2*binary.MaxVarintLen64]byte
	b := append(head[:0], version, kind)
	b = binary.AppendUvarint(b, uint64(len(scope)))
	h.Write(b)
	h.Write([]byte(scope))
	h.Write(binary.AppendUvarint(head[:0], uint64(len(org))))
	h.Write([]byte(org))
	h.Write(tail)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// encode lays out an entry: the layout byte, the status, then the scope,
// the org and the headers each after its length, then the body to the end.
// The scope and org are stored so that a lookup can check them: an entry
// is never answered to another org, even if two keys collided.
func encode(scope, org string, a Answer) []byte {
	fields := [...]string{scope, org, a.ContentType, a.ContentEncoding, a.RequestID}
	size := 1 + (len(fields)+1)*binary.MaxVarintLen64 + len(a.Body)
	for _, f := range fields {
		size += len(f)
	}
	b := make([]byte, 0, size)
	b = append(b, layout)
	b = binary.AppendUvarint(b, uint64(a.Status))
	for _, s := range fields {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return append(b, a.Body...)
}

var errCorrupt = errors.New("cache entry: not an entry of this layout")

// decode reads an entry that encode laid out. The answer's body shares
// data's bytes.
func decode(data []byte) (scope, org string, a Answer, err error) {
	if len(data) == 0 || data[0] != layout {
		return "", "", Answer{}, errCorrupt
	}
	data = data[1:]
	status, n := binary.Uvarint(data)
	if n <= 0 || status < 100 || status > 999 {
		return "", "", Answer{}, errCorrupt
	}
	data = data[n:]
	var fields [5]string
	for i := range fields {
		l, n := binary.Uvarint(data)
		if n <= 0 || l > uint64(len(data)-n) {
			return "", "", Answer{}, errCorrupt
		}
		fields[i] = string(data[n : n+int(l)])
		data = data[n+int(l):]
	}
	return fields[0], fields[1], Answer{Status: int(status), ContentType: fields[2], ContentEncoding: fields[3], RequestID: fields[4], Body: data}, nil
}

// encodeAccepted lays out a key record: the layout byte and when the
// upstream accepted the key, in Unix milliseconds.
func encodeAccepted(at time.Time) []byte {
	return binary.AppendVarint([]byte{layout}, at.UnixMilli())
}

// decodeAccepted reads a key record; false for anything else.
func decodeAccepted(data []byte) (time.Time, bool) {
	if len(data) < 2 || data[0] != layout {
		return time.Time{}, false
	}
	ms, n := binary.Varint(data[1:])
	if n != len(data)-1 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}
