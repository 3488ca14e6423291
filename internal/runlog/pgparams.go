package runlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The commit statement's parameters travel in PostgreSQL's binary format, encoded here
// into one array sized for them, rather than by pgx's generic encoders: those build each
// array through reflection in a buffer that starts small at every statement and grows
// by doubling, which cost about eight bytes allocated for every byte of records
// committed (a group's records are kilobytes), and a collection's share of the
// orchestrator's CPU to match.

// pgCommitName is the name the commit statement is prepared under, on each connection
// that commits.
const pgCommitName = "toolmesh_commit"

// PostgreSQL's type oids of the commit statement's parameters.
const (
	oidBytea      = 17
	oidInt8       = 20
	oidInt4       = 23
	oidText       = 25
	oidInt4Array  = 1007
	oidTextArray  = 1009
	oidByteaArray = 1001
	oidInt8Array  = 1016
)

// pgCommitOIDs are the types of pgCommit's parameters, $1 to $18, as its casts and
// columns make them.
var pgCommitOIDs = []uint32{
	// v: the runs
	oidTextArray, oidInt4Array, oidTextArray, oidInt8Array, oidInt8Array, oidInt8Array, oidInt8Array, oidTextArray, oidTextArray,
	// the time of the commit
	oidInt8,
	// d: their records
	oidTextArray, oidInt8Array, oidInt8Array, oidInt8Array, oidTextArray, oidInt8Array, oidInt8Array, oidByteaArray,
}

// binaryFormat is the format code of every parameter: binary.
var binaryFormat = []int16{1}

// pgParams are the encoded parameters of one commit: values slices of buf.
type pgParams struct {
	buf    []byte
	values [][]byte
}

// maxPooledParams bounds the array a pooled pgParams keeps between commits.
const maxPooledParams = 1 << 20

var pgParamsPool = sync.Pool{New: func() any { return &pgParams{values: make([][]byte, 0, len(pgCommitOIDs))} }}

// encodedSize is the size of c's columns encoded as pgCommit's parameters.
func (c *pgColumns) encodedSize() int {
	return textArraySize(c.ids) + int4ArraySize(len(c.ops)) + textArraySize(c.owners) +
		int8ArraySize(len(c.epochs)) + int8ArraySize(len(c.untils)) + nullableInt8ArraySize(c.firsts) + int8ArraySize(len(c.nexts)) +
		textArraySize(c.states) + textArraySize(c.notes) + 8 +
		textArraySize(c.rIDs) + int8ArraySize(len(c.rSeqs)) + int8ArraySize(len(c.rNs)) + int8ArraySize(len(c.rEpochs)) +
		textArraySize(c.rKinds) + int8ArraySize(len(c.rKindBits)) + int8ArraySize(len(c.rTimes)) + byteaArraySize(c.rData)
}

// encode encodes c's columns and now as pgCommit's parameters, in p's array, grown once to
// their size. A column that is nil is NULL, as pgx sends it (unnest makes no rows of it,
// as of an empty array).
func (p *pgParams) encode(c *pgColumns, now int64) {
	b := slices.Grow(p.buf[:0], c.encodedSize())
	var ends [18]int
	b = appendTextArray(b, c.ids)
	ends[0] = len(b)
	b = appendInt4Array(b, c.ops)
	ends[1] = len(b)
	b = appendTextArray(b, c.owners)
	ends[2] = len(b)
	b = appendInt8Array(b, c.epochs)
	ends[3] = len(b)
	b = appendInt8Array(b, c.untils)
	ends[4] = len(b)
	b = appendNullableInt8Array(b, c.firsts)
	ends[5] = len(b)
	b = appendInt8Array(b, c.nexts)
	ends[6] = len(b)
	b = appendTextArray(b, c.states)
	ends[7] = len(b)
	b = appendTextArray(b, c.notes)
	ends[8] = len(b)
	b = binary.BigEndian.AppendUint64(b, uint64(now))
	ends[9] = len(b)
	b = appendTextArray(b, c.rIDs)
	ends[10] = len(b)
	b = appendInt8Array(b, c.rSeqs)
	ends[11] = len(b)
	b = appendInt8Array(b, c.rNs)
	ends[12] = len(b)
	b = appendInt8Array(b, c.rEpochs)
	ends[13] = len(b)
	b = appendTextArray(b, c.rKinds)
	ends[14] = len(b)
	b = appendInt8Array(b, c.rKindBits)
	ends[15] = len(b)
	b = appendInt8Array(b, c.rTimes)
	ends[16] = len(b)
	b = appendByteaArray(b, c.rData)
	ends[17] = len(b)
	p.buf = b
	p.values = p.values[:0]
	nulls := [18]bool{c.ids == nil, c.ops == nil, c.owners == nil, c.epochs == nil, c.untils == nil, c.firsts == nil, c.nexts == nil,
		c.states == nil, c.notes == nil, false, c.rIDs == nil, c.rSeqs == nil, c.rNs == nil, c.rEpochs == nil, c.rKinds == nil,
		c.rKindBits == nil, c.rTimes == nil, c.rData == nil}
	start := 0
	for i, end := range ends {
		v := b[start:end:end]
		if nulls[i] {
			v = nil
		}
		p.values = append(p.values, v)
		start = end
	}
}

// release gives p back to the pool, unless its array grew past maxPooledParams.
func (p *pgParams) release() {
	if cap(p.buf) > maxPooledParams {
		return
	}
	clear(p.values)
	p.values = p.values[:0]
	pgParamsPool.Put(p)
}

// An array in the binary format, as pgx encodes one: its number of dimensions (1), whether
// it holds a NULL, its elements' type; for its one dimension, its length (0 for an empty
// array) and lower bound (1); then each element as its length (-1 for NULL) and its bytes.
const arrayHeaderSize = 20

func appendArrayHeader(b []byte, n int, hasNull bool, elem uint32) []byte {
	var null uint32
	if hasNull {
		null = 1
	}
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint32(b, null)
	b = binary.BigEndian.AppendUint32(b, elem)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return binary.BigEndian.AppendUint32(b, 1)
}

func textArraySize(xs []string) int {
	n := arrayHeaderSize + 4*len(xs)
	for _, x := range xs {
		n += len(x)
	}
	return n
}

func appendTextArray(b []byte, xs []string) []byte {
	b = appendArrayHeader(b, len(xs), false, oidText)
	for _, x := range xs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(x)))
		b = append(b, x...)
	}
	return b
}

func byteaArraySize(xs [][]byte) int {
	n := arrayHeaderSize + 4*len(xs)
	for _, x := range xs {
		n += len(x)
	}
	return n
}

// appendByteaArray encodes xs; a nil element is NULL, as pgx sends it.
func appendByteaArray(b []byte, xs [][]byte) []byte {
	b = appendArrayHeader(b, len(xs), slices.ContainsFunc(xs, func(x []byte) bool { return x == nil }), oidBytea)
	for _, x := range xs {
		if x == nil {
			b = binary.BigEndian.AppendUint32(b, 0xffffffff)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(x)))
		b = append(b, x...)
	}
	return b
}

func int4ArraySize(n int) int { return arrayHeaderSize + 8*n }

func appendInt4Array(b []byte, xs []int32) []byte {
	b = appendArrayHeader(b, len(xs), false, oidInt4)
	for _, x := range xs {
		b = binary.BigEndian.AppendUint32(b, 4)
		b = binary.BigEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func int8ArraySize(n int) int { return arrayHeaderSize + 12*n }

func appendInt8Array(b []byte, xs []int64) []byte {
	b = appendArrayHeader(b, len(xs), false, oidInt8)
	for _, x := range xs {
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(x))
	}
	return b
}

// nullableInt8ArraySize is the size of xs encoded: a NULL is its length alone.
func nullableInt8ArraySize(xs []*int64) int {
	n := int8ArraySize(len(xs))
	for _, x := range xs {
		if x == nil {
			n -= 8
		}
	}
	return n
}

func appendNullableInt8Array(b []byte, xs []*int64) []byte {
	b = appendArrayHeader(b, len(xs), slices.Contains(xs, nil), oidInt8)
	for _, x := range xs {
		if x == nil {
			b = binary.BigEndian.AppendUint32(b, 0xffffffff)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(*x))
	}
	return b
}

// pgExecCommit runs pgCommit with c's columns on conn, whose DSN has pgx run statements
// in mode, and notes the ids of the runs it wrote in written. In pgx's default mode
// (cache_statement) the statement is prepared on conn the first time, under
// pgCommitName. With simple_protocol (a proxy or a server that takes no other) it goes
// through pgx's own encoding, in one Query message; with the other modes (a pooler in
// transaction mode takes no statement prepared on one of its server connections and run
// on another) it is sent with its parameters each time, unnamed. A prepared statement
// that fails for another reason than a deadlock or a conflict with another transaction
// is deallocated, so that the next commit prepares it again: the server may no longer
// have it, or take it.
func pgExecCommit(ctx context.Context, conn *pgx.Conn, mode pgx.QueryExecMode, c *pgColumns, now int64, written map[string]bool) error {
	if mode == pgx.QueryExecModeSimpleProtocol {
		return pgQueryCommit(ctx, conn, c, now, written)
	}
	p := pgParamsPool.Get().(*pgParams)
	defer p.release()
	p.encode(c, now)
	if mode != pgx.QueryExecModeCacheStatement {
		return readCommitted(conn.PgConn().ExecParams(ctx, pgCommit, p.values, pgCommitOIDs, binaryFormat, nil), written)
	}
	sd, err := conn.Prepare(ctx, pgCommitName, pgCommit)
	if err == nil && !slices.Equal(sd.ParamOIDs, pgCommitOIDs) {
		err = fmt.Errorf("the commit statement's parameters are of types %v, not the %v it is encoded for", sd.ParamOIDs, pgCommitOIDs)
	}
	if err == nil {
		err = readCommitted(conn.PgConn().ExecStatement(ctx, sd, p.values, binaryFormat, nil), written)
	}
	if err != nil && !retriedConflict(err) && !conn.IsClosed() {
		_ = conn.Deallocate(ctx, pgCommitName)
	}
	return err
}

// pgQueryCommit runs pgCommit through pgx's Query and its encoders, as the DSN's mode has
// it (simple_protocol: the values written into the statement's text).
func pgQueryCommit(ctx context.Context, conn *pgx.Conn, c *pgColumns, now int64, written map[string]bool) error {
	rows, err := conn.Query(ctx, pgCommit, c.ids, c.ops, c.owners, c.epochs, c.untils, c.firsts, c.nexts, c.states, c.notes, now,
		c.rIDs, c.rSeqs, c.rNs, c.rEpochs, c.rKinds, c.rKindBits, c.rTimes, c.rData)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		written[id] = true
	}
	return rows.Err()
}

// retriedConflict reports whether err is a deadlock or a serialization failure, which
// pgCommit tries again.
func retriedConflict(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// readCommitted reads the ids of the runs the commit statement wrote into written.
func readCommitted(rr *pgconn.ResultReader, written map[string]bool) error {
	for rr.NextRow() {
		if v := rr.Values(); len(v) == 1 {
			written[string(v[0])] = true
		}
	}
	_, err := rr.Close()
	return err
}
