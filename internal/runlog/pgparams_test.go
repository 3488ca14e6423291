package runlog

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestPGParamsEncodeAsPgx holds the commit's hand-encoded parameters to pgx's own binary
// encoding of the same values, which the statement took before: empty groups, NULL first
// sequence numbers, empty and long data, empty columns and NULL data.
func TestPGParamsEncodeAsPgx(t *testing.T) {
	one, big := int64(1), int64(1)<<40
	long := bytes.Repeat([]byte{0, 1, 0xff}, 5000)
	cases := map[string]*pgColumns{
		"empty": {},
		"a group": {
			ids: []string{"run_1", "acme/run_2", "é"}, ops: []int32{1, 0, 2}, owners: []string{"a:1", "b:2", ""},
			epochs: []int64{1, -3, big}, untils: []int64{0, 1 << 62, -1}, firsts: []*int64{&one, nil, &big}, nexts: []int64{1, 0, 7},
			states: []string{"running", "running", "succeeded"}, notes: []string{"", "held: why", "x"},
			rIDs: []string{"run_1", "é"}, rSeqs: []int64{1, big}, rNs: []int64{3, 1}, rEpochs: []int64{1, 2}, rKinds: []string{"request", "end"},
			rKindBits: []int64{5, 1 << 20}, rTimes: []int64{-5, 1 << 60}, rData: [][]byte{long, {}},
		},
		"empty columns": {
			ids: []string{}, ops: []int32{}, owners: []string{}, epochs: []int64{}, untils: []int64{}, firsts: []*int64{}, nexts: []int64{},
			states: []string{}, notes: []string{}, rIDs: []string{}, rSeqs: []int64{}, rNs: []int64{}, rEpochs: []int64{}, rKinds: []string{},
			rKindBits: []int64{}, rTimes: []int64{}, rData: [][]byte{},
		},
		"nil data": {
			ids: []string{"r"}, ops: []int32{0}, owners: []string{"o"}, epochs: []int64{1}, untils: []int64{2}, firsts: []*int64{&one}, nexts: []int64{3},
			states: []string{"running"}, notes: []string{""}, rIDs: []string{"r", "r"}, rSeqs: []int64{1, 2}, rNs: []int64{1, 1}, rEpochs: []int64{1, 1},
			rKinds: []string{"event", "event"}, rKindBits: []int64{0, 0}, rTimes: []int64{0, 0}, rData: [][]byte{nil, []byte("x")},
		},
		"no records": {
			ids: []string{"run_9"}, ops: []int32{2}, owners: []string{"o"}, epochs: []int64{4}, untils: []int64{0}, firsts: []*int64{nil},
			nexts: []int64{0}, states: []string{"failed"}, notes: []string{"n"},
		},
	}
	m := pgtype.NewMap()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			const now = int64(1_700_000_000_123_456_789)
			p := &pgParams{}
			p.encode(c, now)
			args := []any{c.ids, c.ops, c.owners, c.epochs, c.untils, c.firsts, c.nexts, c.states, c.notes, now,
				c.rIDs, c.rSeqs, c.rNs, c.rEpochs, c.rKinds, c.rKindBits, c.rTimes, c.rData}
			if len(p.values) != len(args) || len(pgCommitOIDs) != len(args) {
				t.Fatalf("%d values, %d types, for %d parameters", len(p.values), len(pgCommitOIDs), len(args))
			}
			for i, arg := range args {
				want, err := m.Encode(pgCommitOIDs[i], pgtype.BinaryFormatCode, arg, nil)
				if err != nil {
					t.Fatalf("$%d: pgx: %v", i+1, err)
				}
				if !bytes.Equal(p.values[i], want) {
					t.Errorf("$%d (%T): encoded\n%x\npgx encodes\n%x", i+1, arg, p.values[i], want)
				}
			}
			if size := c.encodedSize(); size != len(p.buf) {
				t.Errorf("the parameters' size is counted as %d bytes, %d written", size, len(p.buf))
			}
		})
	}
}

// BenchmarkPGParamsEncode is the encoding of a commit of 12 writes of 1 KiB of records.
func BenchmarkPGParamsEncode(b *testing.B) {
	c := &pgColumns{}
	data := bytes.Repeat([]byte("x"), 1100)
	for i := range 12 {
		seq := int64(i)
		c.ids, c.ops, c.owners = append(c.ids, "run_0123456789abcdef"), append(c.ops, 0), append(c.owners, "host:7070")
		c.epochs, c.untils, c.firsts, c.nexts = append(c.epochs, 1), append(c.untils, 1<<60), append(c.firsts, &seq), append(c.nexts, seq+3)
		c.states, c.notes = append(c.states, "running"), append(c.notes, "")
		c.rIDs, c.rSeqs, c.rNs, c.rEpochs = append(c.rIDs, "run_0123456789abcdef"), append(c.rSeqs, seq), append(c.rNs, 3), append(c.rEpochs, 1)
		c.rKinds, c.rKindBits, c.rTimes, c.rData = append(c.rKinds, "dispatch"), append(c.rKindBits, 7), append(c.rTimes, 1<<60), append(c.rData, data)
	}
	b.ReportAllocs()
	for b.Loop() {
		p := pgParamsPool.Get().(*pgParams)
		p.encode(c, 1)
		p.release()
	}
}
