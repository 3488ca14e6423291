package runlog

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// KeySize is the size of a journal encryption key: AES-256.
const KeySize = 32

// MaxSealedRecordBytes bounds the data of one record of an encrypted store: sealed and
// encoded, it must fit MaxRecordBytes.
const MaxSealedRecordBytes = (MaxRecordBytes-64)/4*3 - 64

// Encrypted wraps a store so that every record's data is sealed with AES-256-GCM before
// it is written and opened when it is read: the journal's file or database then holds no
// prompt, argument, result, context value or token in clear. Each record is bound to its
// place (run id, sequence number, kind), so a sealed record moved elsewhere does not
// open. Records written before encryption was turned on are read as they are; a record
// sealed under another key fails to read, naming the key's id.
//
// Run ids, states, owners, leases and approval decisions stay in clear: they are what
// replicas coordinate on.
func Encrypted(s Store, key []byte) (Store, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("runlog: an encryption key is %d bytes, not %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("runlog: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("runlog: %w", err)
	}
	sum := sha256.Sum256(key)
	return &encrypted{Store: s, aead: aead, kid: hex.EncodeToString(sum[:4]), kidBytes: sum[:4]}, nil
}

// ReadKey reads an encryption key from a file: 32 bytes as they are, or written as 64
// hex digits or in base64 (with or without a trailing newline).
func ReadKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("runlog: the encryption key: %w", err)
	}
	if fi.Size() > 256 {
		return nil, fmt.Errorf("runlog: the encryption key file %s is %d bytes: it holds no key", path, fi.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("runlog: the encryption key: %w", err)
	}
	if len(b) == KeySize {
		return b, nil
	}
	text := strings.TrimSpace(string(b))
	if k, err := hex.DecodeString(text); err == nil && len(k) == KeySize {
		return k, nil
	}
	if k, err := base64.StdEncoding.DecodeString(text); err == nil && len(k) == KeySize {
		return k, nil
	}
	return nil, fmt.Errorf("runlog: the encryption key file %s holds no %d-byte key (raw, 64 hex digits or base64)", path, KeySize)
}

type encrypted struct {
	Store
	aead     cipher.AEAD
	kid      string
	kidBytes []byte
}

// A sealed record's data is sealedMagic, the key's id (4 bytes), the nonce and the
// ciphertext. Journals sealed before records could hold any bytes keep theirs as JSON,
// {"enc":"KID:BASE64"}, which open still reads.
const sealedMagic = "\x00tmE"

// sealedJSON is the earlier form of a sealed record.
type sealedJSON struct {
	Enc string `json:"enc"`
}

func aad(runID string, seq int64, kind Kind) []byte {
	b := make([]byte, 0, len(runID)+len(kind)+10)
	b = append(b, runID...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(seq))
	return append(b, kind...)
}

func (e *encrypted) seal(runID string, recs []Record) ([]Record, error) {
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = r
		if len(r.Data) == 0 {
			continue
		}
		if len(r.Data) > MaxSealedRecordBytes {
			return nil, fmt.Errorf("%w: record %d is %d bytes; the limit of an encrypted journal is %d", ErrInvalid, i, len(r.Data), MaxSealedRecordBytes)
		}
		head := len(sealedMagic) + len(e.kidBytes)
		b := make([]byte, head+e.aead.NonceSize(), head+e.aead.NonceSize()+len(r.Data)+e.aead.Overhead())
		copy(b, sealedMagic)
		copy(b[len(sealedMagic):], e.kidBytes)
		nonce := b[head:]
		if _, err := rand.Read(nonce); err != nil {
			return nil, fmt.Errorf("runlog: %w", err)
		}
		out[i].Data = e.aead.Seal(b, nonce, r.Data, aad(runID, r.Seq, r.Kind))
	}
	return out, nil
}

func (e *encrypted) open(runID string, recs []Record) ([]Record, error) {
	for i, r := range recs {
		var kid string
		var ct []byte
		switch {
		case len(r.Data) >= len(sealedMagic)+4 && string(r.Data[:len(sealedMagic)]) == sealedMagic:
			kid, ct = hex.EncodeToString(r.Data[len(sealedMagic):len(sealedMagic)+4]), r.Data[len(sealedMagic)+4:]
		case len(r.Data) >= 8 && string(r.Data[:8]) == `{"enc":"`:
			var s sealedJSON
			if err := json.Unmarshal(r.Data, &s); err != nil {
				return nil, fmt.Errorf("%w: record %d of run %s: %v", ErrDamaged, r.Seq, runID, err)
			}
			k, body, ok := strings.Cut(s.Enc, ":")
			b, err := base64.RawStdEncoding.DecodeString(body)
			if !ok || err != nil {
				return nil, fmt.Errorf("%w: record %d of run %s is not a sealed record", ErrDamaged, r.Seq, runID)
			}
			kid, ct = k, b
		default:
			continue // written in clear, before encryption was on
		}
		if kid != e.kid {
			return nil, fmt.Errorf("runlog: record %d of run %s is sealed under key %s; this orchestrator has key %s", r.Seq, runID, kid, e.kid)
		}
		if len(ct) < e.aead.NonceSize() {
			return nil, fmt.Errorf("%w: record %d of run %s is not a sealed record", ErrDamaged, r.Seq, runID)
		}
		pt, err := e.aead.Open(nil, ct[:e.aead.NonceSize()], ct[e.aead.NonceSize():], aad(runID, r.Seq, r.Kind))
		if err != nil {
			return nil, fmt.Errorf("%w: record %d of run %s does not open: it was altered or moved", ErrDamaged, r.Seq, runID)
		}
		recs[i].Data = pt
	}
	return recs, nil
}

func (e *encrypted) Create(ctx context.Context, runID, owner string, ttl time.Duration, first ...Record) (Lease, error) {
	if err := checkWrite(Lease{RunID: runID}, first); err != nil {
		return Lease{}, err
	}
	recs, err := e.seal(runID, first)
	if err != nil {
		return Lease{}, err
	}
	return e.Store.Create(ctx, runID, owner, ttl, recs...)
}

func (e *encrypted) Append(ctx context.Context, lease Lease, records []Record) error {
	// Bounds apply to what was written, not to its sealed form.
	if err := checkAppend(lease, records); err != nil {
		return err
	}
	recs, err := e.seal(lease.RunID, records)
	if err != nil {
		return err
	}
	return e.Store.Append(ctx, lease, recs)
}

func (e *encrypted) Finish(ctx context.Context, lease Lease, state State, last ...Record) error {
	if err := checkWrite(lease, last); err != nil {
		return err
	}
	recs, err := e.seal(lease.RunID, last)
	if err != nil {
		return err
	}
	return e.Store.Finish(ctx, lease, state, recs...)
}

func (e *encrypted) Read(ctx context.Context, runID string, after int64, limit int, kinds ...Kind) ([]Record, error) {
	recs, err := e.Store.Read(ctx, runID, after, limit, kinds...)
	if err != nil {
		return nil, err
	}
	return e.open(runID, recs)
}

func (e *encrypted) Last(ctx context.Context, runID string, kind Kind) (Record, bool, error) {
	rec, found, err := e.Store.Last(ctx, runID, kind)
	if err != nil || !found {
		return rec, found, err
	}
	recs, err := e.open(runID, []Record{rec})
	if err != nil {
		return Record{}, false, err
	}
	return recs[0], true, nil
}

// Volatile passes the wrapped store's through.
func (e *encrypted) Volatile() bool {
	v, ok := e.Store.(interface{ Volatile() bool })
	return ok && v.Volatile()
}
