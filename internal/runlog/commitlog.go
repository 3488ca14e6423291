package runlog

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// A commitLog is an append-only file of the writes the SQLite store has committed but
// not yet applied to its database (see sqliteLogged). A group of writes is one entry:
// a magic number, the length of its payload, the CRC-32C of the payload, then the
// payload: the log's round, the entry's number, then each write. An entry is committed once written and
// synced; an entry cut short by a crash (its length or checksum do not hold) was never
// acknowledged, and reading stops there.
//
// The file is filled with zeros ahead of what is written, and once its entries are all
// in the database it is written again from its start rather than truncated: a write
// that does not grow the file is made durable by fdatasync without a change to the
// file system's metadata, which halves what a commit waits for. Entries are numbered
// one after another, and each round from the start of the file has a random number of
// its own, which its entries carry: reading stops at an entry of an earlier round (its
// round differs, its number does not follow) as it does at a torn one, and at bytes of
// an earlier round that happen to read as an entry (a record's data holds what a tool
// returned), since they cannot know this round's number.
type commitLog struct {
	path string
	f    *os.File
	// direct, where the file system allows it, is the file opened for direct I/O
	// (O_DIRECT with O_DSYNC): an entry is written from this process's memory to the disk
	// in whole blocks, without a copy in the page cache, in about half the CPU (this
	// process's and the kernel's) of a write through the cache. Nil: entries are written
	// through f. block holds the bytes of the entries in the block the next one starts
	// in (end rounded down to a block), which are written again with it, unchanged; dbuf
	// is the block-aligned array an entry is written from.
	direct *os.File
	aio    *asyncIO
	block  []byte
	dbuf   []byte
	// end is where the next entry goes, size the length of the file (zeros past end).
	end, size int64
	// last is the number of the last entry written; round the number of this round.
	last, round uint64
	// buf is the array entries are encoded in, kept from one to the next (bounded by
	// maxEntryBuf).
	buf []byte
}

// maxEntryBuf bounds the array the log keeps for encoding its entries.
const maxEntryBuf = 1 << 20

// logMagic starts every entry; logMagicV1 started those of logs without rounds, which
// an orchestrator upgraded with such a log reads (as round 0) once, at start.
const (
	logMagic   = 0x544d4332 // "TMC2"
	logMagicV1 = 0x544d434c // "TMCL"
)

// newRound is a round's number: random, never 0 (the round of logs without rounds).
func newRound() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if r := binary.BigEndian.Uint64(b[:]); r != 0 {
			return r
		}
	}
}

// logChunk is how much the file grows by, in zeros, when an entry would pass its end.
const logChunk = 8 << 20

// zeroBlock is what the log grows by, written as many times as it takes.
var zeroBlock = make([]byte, 1<<20)

// logEntry is an entry read back: its number and its writes.
type logEntry struct {
	id, round uint64
	writes    []*write
}

// openCommitLog opens the log at path, creating it when missing, and returns the
// entries it holds, up to the first that is torn or does not follow.
func openCommitLog(path string) (*commitLog, []logEntry, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syncWrites, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("runlog: the commit log: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("runlog: the commit log %s: %w", path, err)
	}
	var entries []logEntry
	good := 0
	for good < len(data) {
		e, n, err := decodeEntry(data[good:])
		if err != nil || (len(entries) > 0 && (e.round != entries[0].round || e.id != entries[len(entries)-1].id+1)) {
			break // torn (never acknowledged), zeros, or bytes of an earlier round
		}
		entries = append(entries, e)
		good += n
	}
	l := &commitLog{path: path, f: f, end: int64(good), size: int64(len(data)), round: newRound()}
	if len(entries) > 0 {
		l.last = entries[len(entries)-1].id
		if r := entries[0].round; r != 0 {
			l.round = r // entries written next follow these
		} else {
			l.end = 0 // a log without rounds: the next entries start a round at the start
		}
	}
	l.block = append(make([]byte, 0, logBlock), data[l.end&^(logBlock-1):l.end]...)
	l.direct = openDirect(path)
	if l.direct != nil && useAsyncIO {
		l.aio = newAsyncIO(l.direct)
	}
	return l, entries, nil
}

// logBlock is the size and alignment of a direct write: a page, a multiple of every
// disk's logical block.
const logBlock = 4096

// openDirect opens path for direct, synchronous writes, or returns nil where the file
// system refuses direct I/O (tmpfs, some network file systems) or the platform has none.
func openDirect(path string) *os.File {
	if directWrites == 0 || !useDirect {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|syncWrites|directWrites, 0)
	if err != nil {
		return nil
	}
	return f
}

// useDirect is false in tests of the log written through the page cache; useAsyncIO in
// those of direct writes made with write system calls.
var useDirect, useAsyncIO = true, true

// alignedBuf is an array of at least n bytes, n rounded up to a block, whose start is
// aligned to a block, reusing buf when it is one.
func alignedBuf(buf []byte, n int) []byte {
	n = (n + logBlock - 1) &^ (logBlock - 1)
	if cap(buf) >= n {
		return buf[:n]
	}
	b := make([]byte, n+logBlock)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (logBlock - 1))
	if off != 0 {
		off = logBlock - off
	}
	return b[off : off+n : off+n]
}

// writeDirect writes entry b at l.end through l.direct: the blocks from the one l.end is
// in to the one b ends in, the first starting with the bytes it holds already (rewritten
// as they are, so that a write torn by a crash leaves each sector's bytes of the earlier
// entries whole), the last ending in zeros. Each block is on disk when it returns.
func (l *commitLog) writeDirect(b []byte) error {
	start := l.end &^ (logBlock - 1)
	head := len(l.block)
	buf := alignedBuf(l.dbuf, head+len(b))
	copy(buf, l.block)
	copy(buf[head:], b)
	clear(buf[head+len(b):])
	if err := l.writeBlocks(buf, start); err != nil {
		if errors.Is(err, syscall.EINVAL) {
			return err // refused before anything was written
		}
		clear(buf[head:]) // what it may have written of b, zeros again
		if _, zerr := l.direct.WriteAt(buf, start); zerr != nil && !errors.Is(zerr, syscall.EFBIG) {
			return syncError{fmt.Errorf("%w; and its bytes could not be zeroed: %w", err, zerr)}
		}
		return err
	}
	end := l.end + int64(len(b))
	l.block = append(l.block[:0], buf[(end&^(logBlock-1))-start:end-start]...)
	if cap(buf) <= maxEntryBuf {
		l.dbuf = buf
	}
	return nil
}

// writeBlocks writes buf at off through l.direct: asynchronously where the kernel
// allows it (asyncIO), else, from then on, with write system calls. A write cut short
// goes on with the rest, as a write system call's caller does.
func (l *commitLog) writeBlocks(buf []byte, off int64) error {
	for l.aio != nil && len(buf) > 0 {
		n, err := l.aio.writeAt(buf, off)
		switch {
		case errors.Is(err, errNoAsyncIO):
			slog.Warn("the journal's commit log is written with write system calls from now on: the kernel refused an asynchronous write", "path", l.path, "error", err.Error())
			l.aio.close()
			l.aio = nil
		case errors.Is(err, syscall.EINTR):
		case err != nil:
			return &fs.PathError{Op: "write", Path: l.path, Err: err}
		case n <= 0:
			return &fs.PathError{Op: "write", Path: l.path, Err: io.ErrShortWrite}
		default:
			buf, off = buf[n:], off+int64(n)
		}
	}
	if len(buf) == 0 {
		return nil
	}
	_, err := l.direct.WriteAt(buf, off)
	return err
}

// write writes an entry of writes, numbered id, after the last; sync makes it durable.
func (l *commitLog) write(id uint64, writes []*write) error {
	b := appendEntry(l.buf, l.round, id, writes)
	if cap(b) <= maxEntryBuf {
		l.buf = b[:0]
	}
	// What follows the entry is zeros, or the start of an older entry: either way not an
	// entry that follows it. A direct write ends at a block's end.
	need := l.end + int64(len(b))
	if l.direct != nil {
		need = (need + logBlock - 1) &^ (logBlock - 1)
	}
	if need > l.size {
		grow := max(int64(logChunk), need-l.size)
		for off := int64(0); off < grow; off += int64(len(zeroBlock)) {
			if _, err := l.f.WriteAt(zeroBlock[:min(int64(len(zeroBlock)), grow-off)], l.size+off); err != nil {
				return err
			}
		}
		if err := l.f.Sync(); err != nil { // the file's new length is metadata
			return syncError{err}
		}
		l.size += grow
	}
	if l.direct != nil {
		err := l.writeDirect(b)
		if errors.Is(err, syscall.EINVAL) {
			// The file system took the file for direct I/O but refuses this write of it
			// (a block larger than ours): nothing was written, and the log goes on
			// through the page cache.
			l.closeDirect()
		} else {
			if err != nil {
				return err
			}
			l.end += int64(len(b))
			l.last = id
			return nil
		}
	}
	if _, err := l.f.WriteAt(b, l.end); err != nil {
		// Part of it may be written (a file size limit, the disk filling), or all of it
		// and its sync failed: it is zeroed, as far as it was written, so that no part
		// of it reads as an entry. Where the zeros cannot be written either, what the
		// file holds is unknown, and the log takes no more entries.
		if _, zerr := l.f.WriteAt(make([]byte, len(b)), l.end); zerr != nil && !errors.Is(zerr, syscall.EFBIG) {
			return syncError{fmt.Errorf("%w; and its bytes could not be zeroed: %w", err, zerr)}
		}
		return err
	}
	l.end += int64(len(b))
	l.last = id
	return nil
}

// syncError is a failed sync: after it, what the file holds is unknown (the kernel may
// have dropped the pages it could not write, and report no error for them again), so
// the log takes no more entries. A write that failed for want of room leaves it as it
// was (its bytes zeroed); the committer stops the log on any other.
type syncError struct{ err error }

func (e syncError) Error() string { return e.err.Error() }
func (e syncError) Unwrap() error { return e.err }

// noRoom reports whether err is a write refused for want of room (the disk full, a
// quota, a file size limit), which passes once there is room again; it is explained so.
func noRoom(err error) (error, bool) {
	var se syncError
	full := errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG)
	if !full || errors.As(err, &se) {
		return err, false
	}
	return fmt.Errorf("%w (no room: the disk is full, or a quota or a file size limit is reached)", err), true
}

// sync makes every entry written so far durable: the writes of a file opened with
// syncWrites are, when they return.
func (l *commitLog) sync() error {
	if syncWrites != 0 {
		return nil
	}
	return syncData(l.f)
}

// rewind starts the log again from its start: every entry is in the database, on disk.
// The entry at the start is made invalid first, so that the log reads empty until the
// next entry is written.
func (l *commitLog) rewind() error {
	if l.end == 0 {
		return nil
	}
	// The database holds every entry, on disk: whether the zeros reach the disk or not,
	// the next entry goes at the start, in a round of its own.
	l.end, l.round, l.block = 0, newRound(), l.block[:0]
	if _, err := l.f.WriteAt(make([]byte, 12), 0); err != nil {
		return err
	}
	return syncData(l.f)
}

func (l *commitLog) close() error {
	l.closeDirect()
	return l.f.Close()
}

// closeDirect closes the log's file for direct I/O and its asynchronous writes: entries
// go through the page cache from then on.
func (l *commitLog) closeDirect() {
	if l.aio != nil {
		l.aio.close()
		l.aio = nil
	}
	if l.direct != nil {
		_ = l.direct.Close()
		l.direct = nil
	}
}

// appendEntry is the bytes of entry id holding writes, whose records are packed in their
// rows (write.row), in the array of dst (its contents overwritten), grown if it is short.
func appendEntry(dst []byte, round, id uint64, writes []*write) []byte {
	size := 32
	for _, w := range writes {
		size += 64 + len(w.lease.RunID) + len(w.lease.Owner) + len(w.note)
		if w.row != nil {
			size += 48 + len(w.row.kind) + len(w.row.data)
		}
	}
	b := dst[:0]
	if cap(b) < size+8 {
		b = make([]byte, 0, size+8)
	}
	b = append(b, make([]byte, 12)...)
	b = binary.BigEndian.AppendUint64(b, round)
	b = binary.AppendUvarint(b, id)
	b = binary.AppendUvarint(b, uint64(len(writes)))
	for _, w := range writes {
		b = append(b, byte(w.kind))
		b = appendString(b, w.lease.RunID)
		b = appendString(b, w.lease.Owner)
		b = binary.AppendVarint(b, w.lease.Epoch)
		b = binary.AppendVarint(b, w.lease.Until.UnixNano())
		b = appendString(b, string(w.state))
		b = appendString(b, w.note)
		if w.row == nil {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(w.row.n))
		b = binary.AppendVarint(b, w.row.first)
		b = binary.AppendVarint(b, w.row.kinds)
		b = appendString(b, w.row.kind)
		b = binary.AppendVarint(b, w.row.time)
		b = appendBytes(b, w.row.data)
	}
	binary.BigEndian.PutUint32(b[0:4], logMagic)
	binary.BigEndian.PutUint32(b[4:8], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[8:12], crc32.Checksum(b[12:], castagnoli))
	return b
}

// loggedRow is a write's records packed as a row of the records table: the first's
// sequence number, kind and time, how many, their kinds and their packed data.
type loggedRow struct {
	first, n, kinds, time int64
	kind                  string
	data                  []byte
	// epoch is the epoch of the lease the records were written under.
	epoch int64
	// array, when set, is the rowArrays array data is in, to be given back (release)
	// once nothing reads it: after the SQLite applier's copy of it to the database.
	array *[]byte
}

// packRow packs records written under epoch as a row, times filled in with now.
func packRow(records []Record, epoch int64, now time.Time) *loggedRow {
	return packRowIn(nil, records, epoch, now)
}

// packPooledRow is packRow in an array of rowArrays, where one is large enough: for a
// row whose reader gives it back (release).
func packPooledRow(records []Record, epoch int64, now time.Time) *loggedRow {
	return packRowIn(rowArrays.get(packedSize(records)), records, epoch, now)
}

// packRowIn is packRow in array, when not nil.
func packRowIn(array *[]byte, records []Record, epoch int64, now time.Time) *loggedRow {
	var dst []byte
	if array != nil {
		dst = *array
	}
	data, kinds := pack(dst, records, now)
	t := records[0].Time
	if t.IsZero() {
		t = now
	}
	return &loggedRow{first: records[0].Seq, n: int64(len(records)), kinds: kinds, time: t.UnixNano(), kind: string(records[0].Kind), data: data, epoch: epoch, array: array}
}

// release gives r's array back to rowArrays: r's data reads as empty from then on. The
// caller is the last to read it.
func (r *loggedRow) release() {
	if r.array != nil {
		*r.array = r.data[:0]
		rowArrays.put(r.array)
		r.data, r.array = nil, nil
	}
}

// rowArrays are the arrays rows are packed in, by size class: the SQLite store packs a
// row at every write and copies it to its database a little later, after which the
// array serves another row (a run's rows were a tenth of the journal's allocations).
var rowArrays arrayPool

// arrayPool pools byte arrays in classes of rowClasses' sizes, each twice the one
// before, so that an array is at most about twice what it holds; a larger one is not
// pooled.
type arrayPool struct{ classes [len(rowClasses)]sync.Pool }

var rowClasses = [...]int{512, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10}

// get returns an array of at least n bytes (an empty slice of it), or nil past the
// largest class.
func (p *arrayPool) get(n int) *[]byte {
	for i, c := range rowClasses {
		if n <= c {
			if b, ok := p.classes[i].Get().(*[]byte); ok {
				return b
			}
			b := make([]byte, 0, c)
			return &b
		}
	}
	return nil
}

// put gives an array back, if it is of one of the classes (a pack that outgrew it made
// another).
func (p *arrayPool) put(b *[]byte) {
	for i, c := range rowClasses {
		if cap(*b) == c {
			*b = (*b)[:0]
			p.classes[i].Put(b)
			return
		}
	}
}

// rowRun is rows of a run that follow one another, to be joined as one (join).
type rowRun struct {
	run  string
	rows []*loggedRow
	// last is what the joined row would be, but its data: its length only (size).
	last loggedRow
	size int
}

func newRowRun(run string, r *loggedRow) *rowRun {
	g := &rowRun{run: run, rows: []*loggedRow{r}, last: *r, size: len(r.data)}
	g.last.data, g.last.array = nil, nil
	return g
}

// take adds r when its records come right after the rows so far, under the same
// lease, and all fit in a row.
func (g *rowRun) take(r *loggedRow) bool {
	p := &g.last
	if r.first != p.first+p.n || r.epoch != p.epoch || p.n+r.n > MaxBatch || g.size+len(r.data) > MaxAppendBytes {
		return false
	}
	g.rows = append(g.rows, r)
	p.n += r.n
	g.size += len(r.data) - 5
	return true
}

// join makes one row of rows, each following the one before it (rowRun.take): their
// records in order, copied once, in the array of dst when it has room (its contents
// overwritten).
func join(dst []byte, rows ...*loggedRow) *loggedRow {
	if len(rows) == 1 {
		return rows[0]
	}
	size, n, kinds := 5, int64(0), int64(0)
	for _, r := range rows {
		size += len(r.data) - 5
		n += r.n
		kinds |= r.kinds
	}
	data := dst[:0]
	if cap(data) < size {
		data = make([]byte, 0, size)
	}
	data = append(data, packedVersion, 0, 0, 0, 0)
	for _, r := range rows {
		data = append(data, r.data[5:]...)
	}
	binary.BigEndian.PutUint32(data[1:5], crc32.Checksum(data[5:], castagnoli))
	p := rows[0]
	return &loggedRow{first: p.first, n: n, kinds: kinds, time: p.time, kind: p.kind, data: data, epoch: p.epoch}
}

// decodeEntry reads the entry at the start of b and returns it with its length.
func decodeEntry(b []byte) (logEntry, int, error) {
	torn := errors.New("a torn entry")
	if len(b) < 12 {
		return logEntry{}, 0, torn
	}
	magic := binary.BigEndian.Uint32(b[0:4])
	if magic != logMagic && magic != logMagicV1 {
		return logEntry{}, 0, torn
	}
	n := int(binary.BigEndian.Uint32(b[4:8]))
	if n > len(b)-12 {
		return logEntry{}, 0, torn
	}
	p := b[12 : 12+n]
	if crc32.Checksum(p, castagnoli) != binary.BigEndian.Uint32(b[8:12]) {
		return logEntry{}, 0, torn
	}
	r := reader{b: p}
	var e logEntry
	if magic == logMagic {
		if len(r.b) < 8 {
			return logEntry{}, 0, torn
		}
		e.round, r.b = binary.BigEndian.Uint64(r.b), r.b[8:]
	}
	e.id = r.uvarint()
	count := r.uvarint()
	for i := uint64(0); i < count && r.err == nil; i++ {
		w := &write{kind: writeKind(r.byte())}
		w.lease.RunID = r.string()
		w.lease.Owner = r.string()
		w.lease.Epoch = r.varint()
		w.lease.Until = time.Unix(0, r.varint())
		w.state = State(r.string())
		w.note = r.string()
		if nrec := r.uvarint(); nrec > 0 {
			row := &loggedRow{n: int64(nrec)}
			row.first = r.varint()
			row.kinds = r.varint()
			row.kind = r.string()
			row.time = r.varint()
			row.data = r.bytes()
			row.epoch = w.lease.Epoch
			w.row = row
		}
		e.writes = append(e.writes, w)
	}
	if r.err != nil || len(r.b) != 0 {
		return logEntry{}, 0, fmt.Errorf("%w: entry %d of the commit log does not decode", ErrDamaged, e.id)
	}
	return e, 12 + n, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// reader reads what appendEntry wrote; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() { r.err, r.b = errors.New("short"), nil }

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *reader) varint() int64 {
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) string() string { return string(r.bytes()) }
