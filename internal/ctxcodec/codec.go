// Package ctxcodec carries a ToolCallContext (toolctx.Context) across a process
// boundary as gRPC metadata, losslessly and within a size bound: the orchestrator's
// router encodes what a group's converter let through, and the worker SDK decodes it.
//
// It imports pkg/toolctx and the standard library only; it must not import gRPC
// (metadata is a map[string][]string, which is what grpc's metadata.MD is).
package ctxcodec

import (
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// DefaultMaxBytes bounds the encoded size of a context when Codec.MaxBytes is zero.
const DefaultMaxBytes = 8192

// Metadata key layout: MetadataPrefix + lowercase unpadded base32 of the key + MetadataSuffix.
const (
	MetadataPrefix = "tm-ctx-"
	MetadataSuffix = "-bin"
)

// entryOverhead is the per-entry cost counted on top of key and value, as HPACK does.
const entryOverhead = 32

// keyEncoding is RFC 4648 base32 in lower case, unpadded: the form of context keys in
// metadata keys, which gRPC requires in lower case.
var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// A process sees few distinct context keys (those its runs carry), and every call
// carries them again: their metadata keys, and the context keys of metadata keys, are
// kept once computed, up to maxCachedKeys of each, so that a call encodes and decodes
// its keys without computing or allocating anything. Past the bound, keys are computed
// every time: a stream of distinct keys costs time, not memory.
const maxCachedKeys = 512

// keyCache maps strings to strings, up to maxCachedKeys entries. Reads take no lock and
// allocate nothing (the map is replaced, never changed); writes copy it, which the bound
// keeps rare and cheap.
type keyCache struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]string]
}

func (c *keyCache) get(k string) (string, bool) {
	m := c.m.Load()
	if m == nil {
		return "", false
	}
	v, ok := (*m)[k]
	return v, ok
}

func (c *keyCache) put(k, v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if _, ok := (*old)[k]; ok || len(*old) >= maxCachedKeys {
			return
		}
	}
	m := make(map[string]string, 1+len(ptrMap(old)))
	maps.Copy(m, ptrMap(old))
	m[k] = v
	c.m.Store(&m)
}

func ptrMap(m *map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	return *m
}

var (
	mdKeys  keyCache // context key → metadata key
	ctxKeys keyCache // canonical metadata key → context key
)

// ErrInvalid reports a context, or metadata, that cannot travel as a ToolCallContext.
var ErrInvalid = errors.New("invalid tool call context")

// ErrTooLarge reports a context whose encoding is over the size limit.
var ErrTooLarge = errors.New("tool call context too large")

// TooLargeError says how far over the limit a context is. It wraps ErrTooLarge.
type TooLargeError struct {
	// Size is the encoded size in bytes.
	Size int
	// Max is the limit.
	Max int
	// LargestKey is the context key of the entry with the largest encoding.
	LargestKey string
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("tool call context is %d bytes encoded, over the %d-byte limit (largest entry: %q)",
		e.Size, e.Max, wire.Truncate(e.LargestKey, 64))
}

// Unwrap makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// Codec carries a toolctx.Context as gRPC metadata, one metadata entry per context entry.
//
// The encoding is lossless for any non-empty UTF-8 key and any UTF-8 value (CR, LF and
// NUL included): the key is base32-encoded into the metadata key, which therefore only
// holds [0-9a-z-] and can never be a gRPC reserved key (grpc-*, :authority,
// content-type, ...), and the "-bin" suffix makes gRPC carry the value's raw bytes.
//
// The zero Codec is ready to use.
type Codec struct {
	// MaxBytes bounds the encoded size: per entry, the metadata key, the base64 of the
	// value and 32 bytes of overhead. Zero or less means DefaultMaxBytes.
	MaxBytes int
}

func (cd Codec) max() int {
	if cd.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return cd.MaxBytes
}

// MetadataKey returns the metadata key that carries the context key key.
func MetadataKey(key string) string {
	if mk, ok := mdKeys.get(key); ok {
		return mk
	}
	b := make([]byte, len(MetadataPrefix)+keyEncoding.EncodedLen(len(key))+len(MetadataSuffix))
	copy(b, MetadataPrefix)
	keyEncoding.Encode(b[len(MetadataPrefix):], []byte(key))
	copy(b[len(b)-len(MetadataSuffix):], MetadataSuffix)
	mk := string(b)
	mdKeys.put(key, mk)
	return mk
}

func entrySize(mdKey, value string) int {
	return len(mdKey) + base64.StdEncoding.EncodedLen(len(value)) + entryOverhead
}

// Check validates c and its encoded size without encoding it: it fails exactly when
// Encode fails.
func (cd Codec) Check(c toolctx.Context) error {
	return cd.encode(c, nil)
}

// encode checks c in one pass over its entries and hands each entry's metadata key and
// value to add, when set. The largest entry, which an error names, is the same whatever
// the order of the pass: the larger, or of two as large the smaller key.
func (cd Codec) encode(c toolctx.Context, add func(mdKey, value string)) error {
	size, largest, largestSize := 0, "", -1
	for k, v := range c.Unordered() {
		if err := validEntry(k, v); err != nil {
			return err
		}
		mk := MetadataKey(k)
		n := entrySize(mk, v)
		size += n
		if n > largestSize || (n == largestSize && k < largest) {
			largest, largestSize = k, n
		}
		if add != nil {
			add(mk, v)
		}
	}
	if size > cd.max() {
		return &TooLargeError{Size: size, Max: cd.max(), LargestKey: largest}
	}
	return nil
}

func validEntry(k, v string) error {
	switch {
	case k == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case !utf8.ValidString(k):
		return fmt.Errorf("%w: key %q is not valid UTF-8", ErrInvalid, k)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: value of key %q is not valid UTF-8", ErrInvalid, k)
	}
	return nil
}

// Encode returns the metadata that carries c; toolctx.Empty gives a nil map (nothing to send).
// Values are the raw value strings: gRPC base64-encodes "-bin" entries on the wire.
func (cd Codec) Encode(c toolctx.Context) (map[string][]string, error) {
	if c.IsEmpty() {
		return nil, cd.encode(c, nil)
	}
	md := make(map[string][]string, c.Len())
	vals := make([]string, 0, c.Len()) // one array behind every entry's slice
	err := cd.encode(c, func(mk, v string) {
		vals = append(vals, v)
		md[mk] = vals[len(vals)-1 : len(vals) : len(vals)]
	})
	if err != nil {
		return nil, err
	}
	return md, nil
}

// AppendPairs appends the metadata that carries c to kv as key, value, key, value...,
// the form metadata.AppendToOutgoingContext takes; on an error kv comes back as it was.
// It allocates at most kv's growth.
func (cd Codec) AppendPairs(kv []string, c toolctx.Context) ([]string, error) {
	n := len(kv)
	kv = slices.Grow(kv, 2*c.Len())
	err := cd.encode(c, func(mk, v string) { kv = append(kv, mk, v) })
	if err != nil {
		return kv[:n], err
	}
	return kv, nil
}

// Decode returns the context carried by md. It reads only keys of the form
// MetadataPrefix…MetadataSuffix and ignores all others. A malformed key, a value that
// is not UTF-8, a key with other than one value, two metadata keys for one context
// key, or a size over the limit is an error.
func (cd Codec) Decode(md map[string][]string) (toolctx.Context, error) {
	var buf [16]string
	keys := buf[:0]
	for k := range md {
		if isContextKey(k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return toolctx.Empty, nil
	}
	slices.Sort(keys) // the same metadata gives the same error

	size, largest, largestSize := 0, "", -1
	for _, k := range keys {
		n := len(k) + entryOverhead
		for _, v := range md[k] {
			n += base64.StdEncoding.EncodedLen(len(v))
		}
		size += n
		if n > largestSize {
			largest, largestSize = k, n
		}
	}
	if size > cd.max() {
		if key, err := decodeKey(largest); err == nil {
			largest = key
		}
		return toolctx.Empty, &TooLargeError{Size: size, Max: cd.max(), LargestKey: largest}
	}

	m := make(map[string]string, len(keys))
	for _, mk := range keys {
		key, err := decodeKey(mk)
		if err != nil {
			return toolctx.Empty, err
		}
		vs := md[mk]
		if len(vs) != 1 {
			return toolctx.Empty, fmt.Errorf("%w: metadata key %q (context key %q) has %d values, want 1", ErrInvalid, mk, key, len(vs))
		}
		if !utf8.ValidString(vs[0]) {
			return toolctx.Empty, fmt.Errorf("%w: value of key %q is not valid UTF-8", ErrInvalid, key)
		}
		if _, dup := m[key]; dup { // unreachable while decodeKey insists on the canonical form
			return toolctx.Empty, fmt.Errorf("%w: key %q is carried twice", ErrInvalid, key)
		}
		m[key] = vs[0]
	}
	return toolinternal.AdoptBag(m).(toolctx.Context), nil
}

func isContextKey(mdKey string) bool {
	return len(mdKey) >= len(MetadataPrefix)+len(MetadataSuffix) &&
		strings.HasPrefix(mdKey, MetadataPrefix) && strings.HasSuffix(mdKey, MetadataSuffix)
}

// decodeKey returns the context key in a metadata key. It accepts only the form
// MetadataKey produces, so that one context key has exactly one metadata key.
func decodeKey(mdKey string) (string, error) {
	if key, ok := ctxKeys.get(mdKey); ok {
		return key, nil
	}
	enc := mdKey[len(MetadataPrefix) : len(mdKey)-len(MetadataSuffix)]
	for _, r := range enc {
		if (r < 'a' || r > 'z') && (r < '2' || r > '7') {
			return "", fmt.Errorf("%w: metadata key %q: %q is not lowercase base32", ErrInvalid, mdKey, enc)
		}
	}
	raw, err := keyEncoding.DecodeString(enc)
	if err != nil || keyEncoding.EncodeToString(raw) != enc {
		return "", fmt.Errorf("%w: metadata key %q: %q is not canonical unpadded base32", ErrInvalid, mdKey, enc)
	}
	key := string(raw)
	switch {
	case key == "":
		return "", fmt.Errorf("%w: metadata key %q carries an empty key", ErrInvalid, mdKey)
	case !utf8.ValidString(key):
		return "", fmt.Errorf("%w: metadata key %q carries key %q, which is not valid UTF-8", ErrInvalid, mdKey, key)
	}
	ctxKeys.put(mdKey, key)
	return key, nil
}
