package runlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Kind is what a record holds.
type Kind string

// The kinds of record.
const (
	KindRequest  Kind = "request"
	KindModel    Kind = "model_response"
	KindDispatch Kind = "dispatch"
	KindOutcome  Kind = "outcome"
	KindEvent    Kind = "event"
	// KindDelta is an event of streamed model text.
	KindDelta Kind = "text_delta"
	// KindApproval is a call waiting for approval; KindDecision the decision its run saw.
	KindApproval Kind = "approval"
	KindDecision Kind = "decision"
	// KindPolicy is a call policy's decision on a call, with the policy's version.
	KindPolicy   Kind = "policy"
	KindSnapshot Kind = "snapshot"
	KindEnd      Kind = "end"
)

// Record is one entry of a run's journal.
type Record struct {
	RunID string
	// Seq numbers the run's records from 1, without gaps.
	Seq int64
	// Epoch is the lease epoch it was written under.
	Epoch int64
	Kind  Kind
	Time  time.Time
	// Data is the record's payload, in whatever form its kind's writer chose: the store
	// keeps its bytes as they are.
	Data []byte
}

// State is where a run is: the one run-state enum of the orchestrator, as the journal
// keeps it, the run service reports it and the API maps it to RunState.
type State string

// The states of a run. A run is Running until it is finished with one of the others.
const (
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
	// StateReplanRequested: a tool asked to plan again.
	StateReplanRequested State = "replan_requested"
	// StateTerminated: a tool asked to terminate.
	StateTerminated State = "terminated"
	// StateEnded is how journals written before StateReplanRequested and StateTerminated
	// existed hold either; a filter on either finds it, and it reads as StateTerminated
	// (Current) unless the run's end record says otherwise.
	StateEnded State = "ended"
	// StateHeld is a run that stopped because it could not go on (its journal holds a
	// record that cannot be read back), and waits for an operator: Cancel ends it; an
	// orchestrator that starts tries it again.
	StateHeld State = "held"
)

// Terminal reports whether s is a finished run's state.
func (s State) Terminal() bool { return s != StateRunning && s != StateHeld && s != "" }

// Current is s as this version names it: a journal's legacy StateEnded is
// StateTerminated, no state is StateRunning.
func (s State) Current() State {
	switch s {
	case StateEnded:
		return StateTerminated
	case "":
		return StateRunning
	}
	return s
}

// matches reports whether a run in state s is in want, a filter's state:
// StateTerminated and StateReplanRequested also find the legacy StateEnded, which was
// either (the run's end record says which).
func (s State) matches(want State) bool {
	return want == "" || s == want || (s == StateEnded && (want == StateTerminated || want == StateReplanRequested))
}

// Lease is the right to drive a run: the owner that holds it, and its epoch.
type Lease struct {
	RunID string
	Owner string
	Epoch int64
	Until time.Time
}

// Run is a run as the journal lists it.
type Run struct {
	ID      string
	State   State
	Owner   string
	Epoch   int64
	Until   time.Time
	Records int64
	Created time.Time
	Updated time.Time
	// Note says why a held run waits.
	Note string
}

// Decision is the answer to an approval: whether the call may run, why, and who said so.
type Decision struct {
	Approve bool
	Reason  string
	By      string
	Time    time.Time
}

// Filter selects runs to list.
type Filter struct {
	// State, when set, keeps only runs in it.
	State State
	// After continues a listing: runs whose id sorts after it.
	After string
	// Limit bounds the runs returned; at most MaxList, 0 means MaxList.
	Limit int
}

// Bounds of the journal.
const (
	// MaxRecordBytes bounds the data of one record.
	MaxRecordBytes = 8 << 20
	// MaxBatch bounds the records of one append.
	MaxBatch = 1024
	// MaxList bounds one listing.
	MaxList = 1000
	// MaxIDBytes bounds run ids, owner names and call keys.
	MaxIDBytes = 512
	// MaxReasonBytes bounds a decision's reason, and a held run's note.
	MaxReasonBytes = 4096
	// MaxRenewals bounds the leases of one RenewAll.
	MaxRenewals = 256
	// MaxWorkers bounds the workers one orchestrator records (SetWorkers) and a listing
	// of them (Workers).
	MaxWorkers = 10000
)

// Errors of the journal.
var (
	// ErrExists: a run of that id is already in the journal.
	ErrExists = errors.New("runlog: the run already exists")
	// ErrNotFound: no run of that id.
	ErrNotFound = errors.New("runlog: no such run")
	// ErrLeased: another owner holds the run's lease, which has not expired.
	ErrLeased = errors.New("runlog: another owner holds the run's lease")
	// ErrFenced: the lease is stale (another owner took the run over) or the run is
	// finished; the writer must stop driving it.
	ErrFenced = errors.New("runlog: the lease is stale")
	// ErrConflict: the records do not follow the run's last record (another writer
	// appended first).
	ErrConflict = errors.New("runlog: the records do not follow the run's last one")
	// ErrFinished: the run is finished; its lease cannot be taken.
	ErrFinished = errors.New("runlog: the run is finished")
	// ErrInvalid: a record or an argument out of bounds.
	ErrInvalid = errors.New("runlog: invalid")
	// ErrRenewAlone: RenewAll did not renew the lease with the others; Renew renews it,
	// or says why it cannot.
	ErrRenewAlone = errors.New("runlog: the lease was not renewed with the others")
	// ErrDamaged: records the store holds cannot be read back as they were written (a
	// file damaged on disk, a row changed by hand): the run cannot be resumed from them.
	ErrDamaged = errors.New("runlog: the journal holds a damaged record")
)

// Renewal is what RenewAll did with one lease.
type Renewal struct {
	// Lease is the lease renewed, when Err is nil.
	Lease Lease
	// Err says why the lease was not renewed: ErrRenewAlone, or the store's failure.
	Err error
	// Decision is the run's decision under RenewAll's key, when Decided.
	Decision Decision
	Decided  bool
}

// checkRenewals refuses a RenewAll of more than MaxRenewals leases, in every result.
func checkRenewals(leases []Lease) []Renewal {
	if len(leases) <= MaxRenewals {
		return nil
	}
	out := make([]Renewal, len(leases))
	for i := range out {
		out[i].Err = fmt.Errorf("%w: %d leases to renew at once, at most %d", ErrInvalid, len(leases), MaxRenewals)
	}
	return out
}

// Store is a run journal. A store may keep the Data of the records it is given (the
// memory store does, rather than copy every record): a caller does not change it once
// it handed it over. What Read and Last return is the caller's own.
type Store interface {
	// Create adds a run and gives owner its first lease (epoch 1) until now+ttl, with its
	// first records (numbered from 1), in one transaction: a run never exists without
	// them.
	Create(ctx context.Context, runID, owner string, ttl time.Duration, first ...Record) (Lease, error)
	// Append adds records to the run of lease, numbered from the run's next sequence
	// number (records[0].Seq must be it, and the others follow). It fails with
	// ErrFenced when the lease is stale or the run finished, and ErrConflict when the
	// sequence numbers do not follow; then nothing is added.
	Append(ctx context.Context, lease Lease, records []Record) error
	// Read returns the records of a run after sequence number after, in order, at most
	// limit (0: all); with kinds, only records of those kinds.
	Read(ctx context.Context, runID string, after int64, limit int, kinds ...Kind) ([]Record, error)
	// Last returns the run's last record of kind; found false when it has none. It reads
	// back from the run's end no further than that record: a resumed run finds its last
	// snapshot without reading the records before it.
	Last(ctx context.Context, runID string, kind Kind) (rec Record, found bool, err error)
	// Acquire takes the lease of a run whose lease expired (or that owner holds
	// already), with a new epoch, until now+ttl.
	Acquire(ctx context.Context, runID, owner string, ttl time.Duration) (Lease, error)
	// Renew extends a lease to now+ttl; ErrFenced when it is stale.
	Renew(ctx context.Context, lease Lease, ttl time.Duration) (Lease, error)
	// RenewAll renews many leases, of runs that go on, at once: each as Renew would,
	// and for each it renewed, the run's decision under key is read as Decision would
	// read it (a request to cancel the run, say). It takes a few statements whatever
	// the number of leases (at most MaxRenewals): an orchestrator renews the leases of
	// all the runs it drives every few seconds. The result at i is leases[i]'s. A lease
	// it did not renew with the others says ErrRenewAlone: Renew tells why (stale, not
	// found, or its run's row busy in another transaction, which RenewAll does not wait
	// for).
	RenewAll(ctx context.Context, leases []Lease, ttl time.Duration, key string) []Renewal
	// Finish appends last (as Append does, when there are any) and records how the run
	// ended, in one transaction, and gives up the lease; ErrFenced when the lease is
	// stale, ErrConflict when last does not follow the run's records.
	Finish(ctx context.Context, lease Lease, state State, last ...Record) error
	// Hold gives up the lease of a run that cannot go on, without finishing it: the run
	// is StateHeld, with reason as its note, until an operator's orchestrator Acquires it
	// (or finishes it after Acquire). ErrFenced when the lease is stale.
	Hold(ctx context.Context, lease Lease, reason string) error
	// Get reports a run.
	Get(ctx context.Context, runID string) (Run, error)
	// List lists runs by id.
	List(ctx context.Context, f Filter) ([]Run, error)
	// Expired lists unfinished runs whose lease expired, at most limit.
	Expired(ctx context.Context, limit int) ([]Run, error)
	// Decide records the decision on the approval of call key of a running run, once:
	// any replica may call it, whoever drives the run. ErrExists when the call is
	// decided already, ErrFinished when the run is finished, ErrNotFound when there is
	// no such run.
	Decide(ctx context.Context, runID, key string, d Decision) error
	// Decision reports the decision on call key of a run, if there is one.
	Decision(ctx context.Context, runID, key string) (Decision, bool, error)
	// Prune deletes finished runs last changed before before, with their records, at
	// most limit of them (0: MaxList), and returns how many it deleted. Running runs are
	// never deleted.
	Prune(ctx context.Context, before time.Time, limit int) (int, error)
	// SetWorkers records the workers registered with orchestrator owner now, in place
	// of those it recorded before: at most MaxWorkers ids.
	SetWorkers(ctx context.Context, owner string, workers []string) error
	// Workers lists the workers any orchestrator recorded at since or later, by id.
	Workers(ctx context.Context, since time.Time) ([]string, error)
	// Close closes the store.
	Close() error
}

// Stats count what a store committed since it opened.
type Stats struct {
	// Commits are the transactions that committed writes of runs (a group commit
	// carries the writes of every run that waited), Writes those writes (a Create, an
	// Append, a Finish or a Hold each), Committing the time the commits took.
	Commits, Writes int64
	Committing      time.Duration
	// Waited is the time the writers waited, summed over the writes handed to the
	// committers, from the hand-over until the outcome (or until the writer gave up):
	// the commit under way before the write's, the gathering of its group, its own.
	Waited time.Duration
	// Logging is the part of Committing the SQLite store spent on its commit log: each
	// entry's encoding, its write and sync (the file's growth when it is full). The rest
	// is checking and accepting the writes. PostgreSQL has none: its log is the server's.
	Logging time.Duration
}

// StatsReporter is a store that counts its commits (the SQL stores).
type StatsReporter interface {
	Stats() Stats
}

// HealthReporter is a store that can tell whether it works (the SQL stores).
type HealthReporter interface {
	// Health is nil while the store takes writes: its last commit failed, or it does not
	// answer a query now, and Health says why.
	Health(ctx context.Context) error
}

// check refuses what no store accepts.
func checkAppend(lease Lease, records []Record) error {
	switch {
	case len(records) == 0:
		return fmt.Errorf("%w: no records", ErrInvalid)
	case len(records) > MaxBatch:
		return fmt.Errorf("%w: %d records in one append; the limit is %d", ErrInvalid, len(records), MaxBatch)
	}
	for i, r := range records {
		if r.RunID != "" && r.RunID != lease.RunID {
			return fmt.Errorf("%w: record %d is of run %q, not %q", ErrInvalid, i, r.RunID, lease.RunID)
		}
		if i > 0 && r.Seq != records[i-1].Seq+1 {
			return fmt.Errorf("%w: record %d has sequence number %d after %d", ErrInvalid, i, r.Seq, records[i-1].Seq)
		}
		if len(r.Data) > MaxRecordBytes {
			return fmt.Errorf("%w: record %d is %d bytes; the limit is %d", ErrInvalid, i, len(r.Data), MaxRecordBytes)
		}
		if r.Kind == "" || len(r.Kind) > maxKindBytes {
			return fmt.Errorf("%w: record %d has no kind, or one over %d bytes", ErrInvalid, i, maxKindBytes)
		}
		if !isText(string(r.Kind)) {
			return checkText(fmt.Sprintf("record %d's kind", i), string(r.Kind))
		}
	}
	return nil
}

// checkDecision refuses what no store accepts in Decide.
func checkDecision(runID, key string, d Decision) error {
	if err := checkID("run id", runID); err != nil {
		return err
	}
	if err := checkID("call key", key); err != nil {
		return err
	}
	if len(d.Reason) > MaxReasonBytes || len(d.By) > MaxIDBytes {
		return fmt.Errorf("%w: a decision's reason is at most %d bytes and its author %d", ErrInvalid, MaxReasonBytes, MaxIDBytes)
	}
	if err := checkText("a decision's reason", d.Reason); err != nil {
		return err
	}
	return checkText("a decision's author", d.By)
}

// checkWorkers refuses what no store accepts in SetWorkers.
func checkWorkers(owner string, workers []string) error {
	if err := checkID("owner", owner); err != nil {
		return err
	}
	if len(workers) > MaxWorkers {
		return fmt.Errorf("%w: %d workers; the limit is %d", ErrInvalid, len(workers), MaxWorkers)
	}
	for _, w := range workers {
		if err := checkID("worker id", w); err != nil {
			return err
		}
	}
	return nil
}

func checkNote(note string) error {
	if len(note) > MaxReasonBytes {
		return fmt.Errorf("%w: a note is at most %d bytes", ErrInvalid, MaxReasonBytes)
	}
	return checkText("a note", note)
}

func checkID(what, id string) error {
	if id == "" || len(id) > MaxIDBytes {
		return fmt.Errorf("%w: %s must be 1 to %d bytes", ErrInvalid, what, MaxIDBytes)
	}
	return checkText(what, id)
}

// checkText refuses a string no store keeps as text: PostgreSQL takes neither bytes
// that are not UTF-8 nor NUL bytes, and refuses the whole statement that carries one —
// with the writes of other runs committed in it.
func checkText(what, s string) error {
	if !isText(s) {
		return fmt.Errorf("%w: %s must be UTF-8 text without NUL bytes", ErrInvalid, what)
	}
	return nil
}

// isText reports whether s is UTF-8 without NUL bytes: text every store keeps as it is.
func isText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// Note is text made fit for a note (Store.Hold): its bytes that are not UTF-8 and its
// NUL bytes replaced, cut to MaxReasonBytes at a character's start.
func Note(text string) string {
	text = strings.ToValidUTF8(strings.ReplaceAll(text, "\x00", "\uFFFD"), "\uFFFD")
	if len(text) <= MaxReasonBytes {
		return text
	}
	cut := MaxReasonBytes
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut]
}

func listLimit(n int) int {
	if n <= 0 || n > MaxList {
		return MaxList
	}
	return n
}
