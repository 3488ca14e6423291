package runlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"time"
)

// The SQL stores keep the records of one append in one row: a run's step (its model
// response, its calls' dispatches, the events it caused) costs the database one row,
// one index entry and one page write, however many records it has. The row's seq is the
// first record's sequence number and n the number of records; kinds has the bit of each
// record's kind (kindBit), so that a read by kind skips rows without one. Records keep
// their own sequence numbers: a reader sees the records, never the rows.
//
// A row's data is a version byte, the CRC-32C of the rest, then each record: its kind
// (length and bytes), its time (nanoseconds since the epoch, as a varint) and its data
// (length and bytes). A row that does not decode to exactly n records under its checksum
// is damaged (ErrDamaged), never read as records it does not hold.
//
// Rows of journals written before (schema version 3 and earlier) hold one record each,
// as it is, with kinds 0: they are read as they were written.

// packedVersion is the first byte of a packed row's data.
const packedVersion = 1

// maxKindBytes bounds a record's kind.
const maxKindBytes = 64

// MaxAppendBytes bounds the data of the records of one append (and of Create's and
// Finish's): they are one row.
const MaxAppendBytes = 2 * MaxRecordBytes

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// kindBits are the bits of the known kinds in a row's kinds; any other kind has
// otherKind.
var kindBits = map[Kind]int64{
	KindRequest: 1 << 0, KindModel: 1 << 1, KindDispatch: 1 << 2, KindOutcome: 1 << 3, KindEvent: 1 << 4,
	KindDelta: 1 << 5, KindApproval: 1 << 6, KindDecision: 1 << 7, KindSnapshot: 1 << 8, KindEnd: 1 << 9,
}

const otherKind int64 = 1 << 62

func kindBit(k Kind) int64 {
	if b, ok := kindBits[k]; ok {
		return b
	}
	return otherKind
}

// kindFilter selects records by kind: a row's kinds select its rows in the database
// (mask), and kinds its records exactly, since kinds with no bit of their own share
// otherKind. No kinds: every record.
type kindFilter struct {
	mask  int64
	kinds []Kind
}

func filterKinds(kinds ...Kind) kindFilter { return kindFilter{mask: kindsMask(kinds), kinds: kinds} }

func (f kindFilter) has(k Kind) bool {
	b := kindBit(k)
	switch {
	case b&f.mask == 0:
		return false
	case b != otherKind || len(f.kinds) == 0:
		return true
	}
	return slices.Contains(f.kinds, k)
}

// kindsMask is the bits of kinds; every bit (all kinds) when there are none.
func kindsMask(kinds []Kind) int64 {
	if len(kinds) == 0 {
		return -1
	}
	var m int64
	for _, k := range kinds {
		m |= kindBit(k)
	}
	return m
}

// packedSize is the size of records packed.
func packedSize(records []Record) int {
	n := 5
	for _, r := range records {
		n += 3*binary.MaxVarintLen64 + len(r.Kind) + len(r.Data)
	}
	return n
}

// pack encodes records as one row's data, in the array of dst when it has room (its
// contents overwritten), and returns it with the row's kinds. A record without a time
// gets now.
func pack(dst []byte, records []Record, now time.Time) ([]byte, int64) {
	b := dst[:0]
	if size := packedSize(records); cap(b) < size {
		b = make([]byte, 0, size)
	}
	b = append(b, packedVersion, 0, 0, 0, 0)
	var kinds int64
	for _, r := range records {
		kinds |= kindBit(r.Kind)
		t := r.Time
		if t.IsZero() {
			t = now
		}
		b = binary.AppendUvarint(b, uint64(len(r.Kind)))
		b = append(b, r.Kind...)
		b = binary.AppendVarint(b, t.UnixNano())
		b = binary.AppendUvarint(b, uint64(len(r.Data)))
		b = append(b, r.Data...)
	}
	binary.BigEndian.PutUint32(b[1:5], crc32.Checksum(b[5:], castagnoli))
	return b, kinds
}

// row is a stored row of records as a SQL store reads it.
type row struct {
	seq, n, epoch int64
	kind          string
	kinds         int64
	time          int64
	data          []byte
}

// unpack appends the records of r that are after after and of a kind f has to out, at
// most limit of them in all (0: no bound).
func unpack(runID string, r row, after int64, f kindFilter, limit int, out []Record) ([]Record, error) {
	if r.kinds == 0 { // one record, as written before rows were packed
		if r.seq > after && f.has(Kind(r.kind)) {
			rec := Record{RunID: runID, Seq: r.seq, Epoch: r.epoch, Kind: Kind(r.kind), Time: time.Unix(0, r.time)}
			if len(r.data) > 0 {
				rec.Data = r.data
			}
			out = append(out, rec)
		}
		return out, nil
	}
	damaged := func(why string) error {
		return fmt.Errorf("%w: run %s, records %d to %d: %s", ErrDamaged, runID, r.seq, r.seq+r.n-1, why)
	}
	b := r.data
	if len(b) < 5 || b[0] != packedVersion {
		return out, damaged("not a packed row of a version this orchestrator reads")
	}
	if crc32.Checksum(b[5:], castagnoli) != binary.BigEndian.Uint32(b[1:5]) {
		return out, damaged("its checksum does not match")
	}
	b = b[5:]
	for i := int64(0); i < r.n; i++ {
		kl, k := binary.Uvarint(b)
		if k <= 0 || kl > maxKindBytes || uint64(len(b)-k) < kl {
			return out, damaged("a record's kind is cut short")
		}
		kind := Kind(b[k : k+int(kl)])
		b = b[k+int(kl):]
		t, k := binary.Varint(b)
		if k <= 0 {
			return out, damaged("a record's time is cut short")
		}
		b = b[k:]
		dl, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < dl {
			return out, damaged("a record's data is cut short")
		}
		data := b[k : k+int(dl)]
		b = b[k+int(dl):]
		seq := r.seq + i
		if seq <= after || !f.has(kind) {
			continue
		}
		if limit > 0 && len(out) >= limit {
			return out, nil
		}
		rec := Record{RunID: runID, Seq: seq, Epoch: r.epoch, Kind: kind, Time: time.Unix(0, t)}
		if len(data) > 0 {
			rec.Data = data
		}
		out = append(out, rec)
	}
	if len(b) != 0 {
		return out, damaged("bytes follow its last record")
	}
	return out, nil
}
