// Package identity decides which organization a request belongs to: the
// organization's buckets, breaker and logs are keyed by it. The bearer key
// itself is never kept: only its SHA-256 is compared or fingerprinted.
package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"golang.org/x/net/http/httpguts"

	"github.com/systemone/systemone-gateway/internal/smallfile"
)

// Unknown-key policies for keys missing from the org_keys file.
const (
	UnknownOwn    = "own"    // the key is an organization of its own
	UnknownReject = "reject" // the key is refused with 401 at the edge
)

// Resolver maps a request to its organization id.
type Resolver struct {
	header string
	keys   map[[sha256.Size]byte]string
	reject bool
}

// Validate checks the identity options as written, before placeholders are
// resolved: header, when set and free of placeholders, is a valid header
// name that carries no credential (see CheckHeader); unknown is UnknownOwn
// (the default, also "") or UnknownReject, and UnknownReject has a keys
// file to know keys by. Its error texts are the ones the Caddyfile reports.
func Validate(header, keysFile, unknown string) error {
	if header != "" && !strings.Contains(header, "{") {
		if err := CheckHeader(header); err != nil {
			return err
		}
	}
	switch unknown {
	case "", UnknownOwn:
	case UnknownReject:
		if keysFile == "" {
			return errors.New("unknown_keys reject needs org_keys")
		}
	default:
		return fmt.Errorf("unknown_keys must be own or reject, not %q", unknown)
	}
	return nil
}

// credentialHeaders carry secrets: as org_header, their value would become
// the org id, and so be written into every log entry, Redis key, queue
// entry and metric label the org names.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie"}

// CheckHeader checks an org_header name, placeholders resolved: an HTTP
// header name (a token), and none of the headers that carry credentials.
func CheckHeader(header string) error {
	if !httpguts.ValidHeaderFieldName(header) {
		return fmt.Errorf("org_header %q is not a valid header name (letters, digits and !#$%%&'*+-.^_`|~ only)", header)
	}
	for _, h := range credentialHeaders {
		if strings.EqualFold(header, h) {
			return fmt.Errorf("org_header %s carries credentials: its value would be the org id in every log entry, Redis key and queue entry", h)
		}
	}
	return nil
}

// MaxKeysFile is the largest org_keys file read: smallfile.MaxSize, 16 MiB
// (about 150,000 keys).
const MaxKeysFile = smallfile.MaxSize

// New builds a resolver. header, when set, names a request header that a
// preceding handler sets and that is trusted as the org id. keysFile, when
// set, is a JSON object mapping the lowercase hex SHA-256 of a key to an org
// id. unknown is UnknownOwn (default) or UnknownReject. header and keysFile
// may hold placeholders such as {env.NAME}, resolved here.
func New(header, keysFile, unknown string) (*Resolver, error) {
	if err := Validate(header, keysFile, unknown); err != nil {
		return nil, err
	}
	repl := caddy.NewReplacer()
	header, keysFile = repl.ReplaceAll(header, ""), repl.ReplaceAll(keysFile, "")
	if header != "" {
		if err := CheckHeader(header); err != nil {
			return nil, err
		}
	}
	r := &Resolver{header: header, reject: unknown == UnknownReject}
	if r.reject && keysFile == "" {
		return nil, errors.New("unknown_keys reject needs org_keys, empty once its placeholders are resolved")
	}
	if keysFile != "" {
		keys, err := load(keysFile)
		if err != nil {
			return nil, fmt.Errorf("loading org_keys %s: %v", keysFile, err)
		}
		r.keys = keys
	}
	return r, nil
}

func load(path string) (map[[sha256.Size]byte]string, error) {
	data, err := smallfile.Read(path, MaxKeysFile)
	if err != nil {
		return nil, err
	}
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	keys := make(map[[sha256.Size]byte]string, len(m))
	for digest, org := range m {
		var sum [sha256.Size]byte
		if n, err := hex.Decode(sum[:], []byte(strings.ToLower(digest))); err != nil || n != sha256.Size {
			// The value could be a key pasted by mistake: never echo it.
			return nil, fmt.Errorf("an entry is not a 64-digit hex SHA-256")
		}
		if org == "" {
			return nil, fmt.Errorf("an entry maps to an empty org id")
		}
		keys[sum] = org
	}
	return keys, nil
}

// Source is how a request's organization was known: the identity mode
// that named it. The same org name known two ways is two orgs to whatever
// an org's requests share (the answer cache).
type Source string

// The identity modes.
const (
	// SourceHeader: the org_header, set by a preceding handler.
	SourceHeader Source = "org_header"
	// SourceKeys: the org the org_keys file maps the key to.
	SourceKeys Source = "org_keys"
	// SourceKey: the key is an org of its own, named by its fingerprint.
	SourceKey Source = "key"
)

// Caller is who sent a request.
type Caller struct {
	// Org is the organization id.
	Org string
	// Source is the identity mode that named it.
	Source Source
	// KeySum is the SHA-256 of the bearer key, the only form of the key
	// the gateway keeps.
	KeySum [sha256.Size]byte
}

// Identify returns who sent a request whose bearer key is key, and false
// when the key must be refused. With unknown_keys reject, a key missing
// from org_keys is refused whatever the org_header says: the header names
// the org of a key the gateway knows, it does not admit a key.
func (r *Resolver) Identify(req *http.Request, key string) (Caller, bool) {
	c := Caller{KeySum: sha256.Sum256([]byte(key))}
	org, known := r.keys[c.KeySum]
	if r.reject && !known {
		return Caller{}, false
	}
	if r.header != "" {
		if h := req.Header.Get(r.header); h != "" {
			c.Org, c.Source = h, SourceHeader
			return c, true
		}
	}
	if known {
		c.Org, c.Source = org, SourceKeys
		return c, true
	}
	c.Org, c.Source = Fingerprint(c.KeySum), SourceKey
	return c, true
}

// Org returns the organization of a request whose bearer key is key, and
// false when the key must be refused.
func (r *Resolver) Org(req *http.Request, key string) (string, bool) {
	c, ok := r.Identify(req, key)
	return c.Org, ok
}

// Orgs returns the organization ids the org_keys file names, each once,
// sorted; none without org_keys.
func (r *Resolver) Orgs() []string {
	orgs := make([]string, 0, len(r.keys))
	for _, org := range r.keys {
		orgs = append(orgs, org)
	}
	slices.Sort(orgs)
	return slices.Compact(orgs)
}

// Fingerprint is the org id of a key that has no org of its own: a short,
// stable, one-way name ("key-" and 16 hex digits of its SHA-256).
func Fingerprint(sum [sha256.Size]byte) string {
	return "key-" + hex.EncodeToString(sum[:8])
}

// BearerKey returns the key of an `Authorization: Bearer <key>` header.
func BearerKey(h http.Header) (string, bool) {
	v := h.Get("Authorization")
	if len(v) < 7 || !strings.EqualFold(v[:7], "bearer ") {
		return "", false
	}
	key := strings.TrimSpace(v[7:])
	return key, key != ""
}
