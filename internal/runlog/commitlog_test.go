package runlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func logWrite(id string, seq int64) *write {
	w := &write{kind: writeAppend, lease: Lease{RunID: id, Owner: "o", Epoch: 1, Until: time.Unix(0, 5)}}
	w.records = []Record{{Seq: seq, Kind: KindEvent, Data: []byte{byte(seq)}}}
	w.row = packRow(w.records, 1, time.Unix(0, 7))
	return w
}

// The commit log reads back the entries written to it, in order; an entry cut short
// (a crash while it was written), and anything after it, is not read; after a rewind
// only the entries written since are read, not those of the round before.
func TestCommitLog(t *testing.T) {
	inEveryMode(t, testCommitLog)
}

// inEveryMode runs test on a log written with direct I/O, asynchronously and with write
// system calls, where the file system of the test's temporary directory and the kernel
// allow them, and on one written through the page cache.
func inEveryMode(t *testing.T, test func(t *testing.T)) {
	for _, mode := range []struct {
		name          string
		direct, async bool
	}{{"direct-async", true, true}, {"direct", true, false}, {"cached", false, false}} {
		t.Run(mode.name, func(t *testing.T) {
			wasDirect, wasAsync := useDirect, useAsyncIO
			useDirect, useAsyncIO = mode.direct, mode.async
			t.Cleanup(func() { useDirect, useAsyncIO = wasDirect, wasAsync })
			if mode.direct {
				l, _, err := openCommitLog(filepath.Join(t.TempDir(), "probe"))
				if err != nil {
					t.Fatal(err)
				}
				direct, async := l.direct != nil, l.aio != nil
				_ = l.close()
				if !direct {
					t.Skip("the file system of the temporary directory refuses direct I/O")
				}
				if mode.async && !async {
					t.Skip("no asynchronous I/O here")
				}
			}
			before := asyncWrites.Load()
			test(t)
			if wrote := asyncWrites.Load() > before; wrote != mode.async {
				t.Errorf("writes made asynchronously: %v, want %v", wrote, mode.async)
			}
		})
	}
}

func testCommitLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db-commits")
	l, entries, err := openCommitLog(path)
	if err != nil || len(entries) != 0 {
		t.Fatalf("a new log: %v, %v", entries, err)
	}
	for i := uint64(1); i <= 3; i++ {
		if err := l.write(i, []*write{logWrite("r", int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.sync(); err != nil {
		t.Fatal(err)
	}
	end := l.end
	_ = l.close()
	// A fourth entry, torn: its first bytes only.
	full := appendEntry(nil, l.round, 4, []*write{logWrite("r", 4)})
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	_, _ = f.WriteAt(full[:len(full)-3], end)
	_ = f.Close()

	l, entries, err = openCommitLog(path)
	if err != nil || len(entries) != 3 || entries[2].id != 3 || entries[2].writes[0].row.first != 3 || l.end != end {
		t.Fatalf("reopened: %d entries, end %d (want 3, %d), %v", len(entries), l.end, end, err)
	}
	if w := entries[1].writes[0]; w.lease.RunID != "r" || w.lease.Owner != "o" || w.lease.Epoch != 1 || w.row.n != 1 || w.row.epoch != 1 {
		t.Errorf("entry 2's write: %+v, row %+v", w, w.row)
	}
	recs, err := unpack("r", row{seq: 2, n: 1, epoch: 1, kinds: entries[1].writes[0].row.kinds, data: entries[1].writes[0].row.data}, 0, filterKinds(), 0, nil)
	if err != nil || len(recs) != 1 || recs[0].Data[0] != 2 || recs[0].Time.UnixNano() != 7 {
		t.Errorf("entry 2's records: %+v, %v", recs, err)
	}
	// The torn entry is overwritten by the next.
	if err := l.write(4, []*write{logWrite("r", 4)}); err != nil {
		t.Fatal(err)
	}
	if err := l.rewind(); err != nil {
		t.Fatal(err)
	}
	if err := l.write(5, []*write{logWrite("r", 5)}); err != nil {
		t.Fatal(err)
	}
	_ = l.close()
	_, entries, err = openCommitLog(path)
	if err != nil || len(entries) != 1 || entries[0].id != 5 {
		t.Fatalf("after a rewind: %+v, %v; want entry 5 alone", entries, err)
	}
	// Rewound and nothing written since: empty.
	l, _, _ = openCommitLog(path)
	l.end = 100
	if err := l.rewind(); err != nil {
		t.Fatal(err)
	}
	_ = l.close()
	if _, entries, _ := openCommitLog(path); len(entries) != 0 {
		t.Errorf("a rewound log reads %d entries", len(entries))
	}
}

// Consecutive rows of a run under one lease join into one, whose records read as both.
func TestJoinRows(t *testing.T) {
	a := packRow([]Record{{Seq: 1, Kind: KindRequest, Data: []byte("a")}, {Seq: 2, Kind: KindEvent}}, 1, time.Unix(0, 1))
	b := packRow([]Record{{Seq: 3, Kind: KindModel, Data: []byte("b")}}, 1, time.Unix(0, 2))
	other := packRow([]Record{{Seq: 3, Kind: KindModel}}, 2, time.Unix(0, 2))
	if newRowRun("r", b).take(a) {
		t.Error("a row joined to the row after it")
	}
	g := newRowRun("r", a)
	if g.take(other) {
		t.Error("rows of two leases joined")
	}
	if !g.take(b) {
		t.Fatal("a row not joined to the one before it")
	}
	c := packRow([]Record{{Seq: 4, Kind: KindOutcome, Data: []byte("c")}}, 1, time.Unix(0, 3))
	if !g.take(c) {
		t.Fatal("a third row not joined")
	}
	// Joined in an array given, whatever it held, and again in a fresh one.
	for _, dst := range [][]byte{[]byte(strings.Repeat("x", 300)), nil} {
		j := join(dst, g.rows...)
		if dst != nil && &j.data[0] != &dst[0] {
			t.Error("joined outside the array given")
		}
		recs, err := unpack("r", row{seq: j.first, n: j.n, epoch: 1, kinds: j.kinds, data: j.data}, 0, filterKinds(), 0, nil)
		if err != nil || len(recs) != 4 || string(recs[0].Data) != "a" || recs[1].Kind != KindEvent || string(recs[2].Data) != "b" || recs[2].Seq != 3 || string(recs[3].Data) != "c" || recs[3].Seq != 4 {
			t.Errorf("joined: %+v, %v", recs, err)
		}
	}
}

// A row packed to be given back is packed in a pooled array of the smallest class it
// fits, or its own past the largest; given back, it reads as empty, and giving it back
// again gives nothing. A row packed otherwise is exactly its size and is never given
// back.
func TestRowArrays(t *testing.T) {
	rec := func(n int) []Record { return []Record{{Seq: 1, Kind: KindModel, Data: make([]byte, n)}} }
	for _, c := range []struct{ data, class int }{{1, 512}, {600, 1 << 10}, {5000, 8 << 10}, {100 << 10, 128 << 10}} {
		r := packPooledRow(rec(c.data), 1, time.Unix(0, 1))
		if r.array == nil || cap(r.data) != c.class || &r.data[:1][0] != &(*r.array)[:1][0] {
			t.Errorf("%d bytes of data: packed in %d bytes (pooled: %v), want the pool's %d", c.data, cap(r.data), r.array != nil, c.class)
		}
		array := r.array
		r.release()
		if r.data != nil || r.array != nil || len(*array) != 0 {
			t.Errorf("given back: %d bytes, array %v", len(r.data), r.array)
		}
		r.release() // nothing more to give back
	}
	big := packPooledRow(rec(rowClasses[len(rowClasses)-1]), 1, time.Unix(0, 1))
	if big.array != nil {
		t.Error("a row past the largest class is pooled")
	}
	exact := packRow(rec(3000), 1, time.Unix(0, 1))
	if exact.array != nil || cap(exact.data) != packedSize(rec(3000)) {
		t.Errorf("a row packed not to be given back: %d bytes, pooled %v", cap(exact.data), exact.array != nil)
	}
	exact.release()
	if exact.data == nil {
		t.Error("a row of its own given back")
	}
}

// Bytes of an earlier round that form a valid entry with the next number, right where
// the log's entries now end, are not read as an entry: an entry of this round carries
// the round's own number, which no earlier bytes know. (A record's data, which a tool
// chooses, could hold such bytes; they were read as an acknowledged entry.)
func TestCommitLogRoundsAreApart(t *testing.T) {
	dir := t.TempDir()
	withData := func(id string, data []byte) *write {
		w := &write{kind: writeAppend, lease: Lease{RunID: id, Owner: "o", Epoch: 1, Until: time.Unix(0, 5)}}
		w.records = []Record{{Seq: 1, Kind: KindEvent, Data: data}}
		w.row = packRow(w.records, 1, time.Unix(0, 7))
		return w
	}
	// entryBytes is an entry as a log writes it, numbered id, holding data.
	entryBytes := func(name string, id uint64, data []byte) []byte {
		s, _, err := openCommitLog(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.close() }()
		s.last = id - 1
		if err := s.write(id, []*write{withData("r", data)}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b[:s.end]
	}
	forged := entryBytes("forged", 3, []byte("forged"))

	path := filepath.Join(dir, "commits")
	l, _, err := openCommitLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.write(1, []*write{withData("r", append(bytes.Repeat([]byte("a tool's output "), 32), forged...))}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	at := bytes.Index(b, forged)
	if at < 0 {
		t.Fatal("the forged entry is not in the log")
	}
	if err := l.rewind(); err != nil {
		t.Fatal(err)
	}
	// Entry 2 of the next round ends where the forged bytes start.
	pad := at - len(entryBytes("size", 2, nil)) // less the longer lengths' varints
	for len(entryBytes(fmt.Sprint("size", pad), 2, make([]byte, pad))) > at {
		pad--
	}
	if n := len(entryBytes(fmt.Sprint("size-check", pad), 2, make([]byte, pad))); n != at {
		t.Fatalf("no entry 2 of %d bytes (%d)", at, n)
	}
	if err := l.write(2, []*write{withData("r", make([]byte, pad))}); err != nil {
		t.Fatal(err)
	}
	if l.end != int64(at) {
		t.Fatalf("entry 2 ends at %d, the forged bytes start at %d", l.end, at)
	}
	_ = l.close()
	_, entries, err := openCommitLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].id != 2 {
		ids := []uint64{}
		for _, e := range entries {
			ids = append(ids, e.id)
		}
		t.Errorf("the log reads entries %v, want [2]: bytes of an earlier round read as an entry", ids)
	}
}

// A log written before logs had rounds is read once, at start (its entries are copied to
// the database then), and the entries written next start a round at the file's start.
func TestCommitLogWithoutRounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "commits")
	// Entries 1 and 2 as an orchestrator without rounds wrote them.
	var old []byte
	for id := uint64(1); id <= 2; id++ {
		b := appendEntry(nil, 0, id, []*write{logWrite("r", int64(id))})
		v1 := append(append([]byte{}, b[:12]...), b[20:]...) // without the round
		binary.BigEndian.PutUint32(v1[0:4], logMagicV1)
		binary.BigEndian.PutUint32(v1[4:8], uint32(len(v1)-12))
		binary.BigEndian.PutUint32(v1[8:12], crc32.Checksum(v1[12:], castagnoli))
		old = append(old, v1...)
	}
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	l, entries, err := openCommitLog(path)
	if err != nil || len(entries) != 2 || entries[1].id != 2 || entries[1].writes[0].row.first != 2 {
		t.Fatalf("a log without rounds: %d entries, %v", len(entries), err)
	}
	if err := l.write(3, []*write{logWrite("r", 3)}); err != nil {
		t.Fatal(err)
	}
	_ = l.close()
	if _, entries, _ := openCommitLog(path); len(entries) != 1 || entries[0].id != 3 || entries[0].round == 0 {
		t.Errorf("after the first entry with rounds: %+v", entries)
	}
}

// Entries of every size, many in a block and some over several, read back whole after
// the log is closed and opened again, and again after more are written where the
// reopened log's last block ends: a direct write rewrites the start of its first block
// (the entries before it) as it was.
func TestCommitLogEntriesOfEverySize(t *testing.T) {
	inEveryMode(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "journal.db-commits")
		sized := func(id uint64) *write {
			w := logWrite("r", int64(id))
			n := int(id*id*37) % 9000
			data := bytes.Repeat([]byte{byte(id)}, n+1)
			w.records = []Record{{Seq: int64(id), Kind: KindEvent, Data: data}}
			w.row = packRow(w.records, 1, time.Unix(0, 7))
			return w
		}
		check := func(entries []logEntry, want uint64) {
			t.Helper()
			if uint64(len(entries)) != want {
				t.Fatalf("%d entries read back, want %d", len(entries), want)
			}
			for i, e := range entries {
				id := uint64(i + 1)
				got, err := unpack("r", row{seq: int64(id), n: 1, epoch: 1, kinds: e.writes[0].row.kinds, data: e.writes[0].row.data}, 0, filterKinds(), 0, nil)
				wantData := sized(id).records[0].Data
				if e.id != id || err != nil || len(got) != 1 || !bytes.Equal(got[0].Data, wantData) {
					t.Fatalf("entry %d: id %d, %d records, %v", id, e.id, len(got), err)
				}
			}
		}
		l, _, err := openCommitLog(path)
		if err != nil {
			t.Fatal(err)
		}
		id := uint64(0)
		writeSome := func(n int) {
			t.Helper()
			for range n {
				id++
				if err := l.write(id, []*write{sized(id)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		writeSome(40)
		_ = l.close()
		l, entries, err := openCommitLog(path)
		if err != nil {
			t.Fatal(err)
		}
		check(entries, 40)
		if l.end%logBlock == 0 {
			t.Fatalf("the log ends at %d, a block's end: the next write does not start inside a block", l.end)
		}
		writeSome(25)
		_ = l.close()
		_, entries, err = openCommitLog(path)
		if err != nil {
			t.Fatal(err)
		}
		check(entries, 65)
	})
}
