package runlog

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"
)

// MemoryLimits bound what a journal in memory keeps of finished runs: the oldest
// finished runs go first once there are more than FinishedRuns of them or they hold more
// than FinishedBytes of the heap (their records' data and arrays, and what the store
// keeps of each record, decision and run besides, as it counts them). Zero means the
// default (DefaultFinishedRuns, DefaultFinishedBytes). Running runs are never dropped.
type MemoryLimits struct {
	FinishedRuns  int
	FinishedBytes int64
}

// The defaults of MemoryLimits.
const (
	DefaultFinishedRuns  = 1000
	DefaultFinishedBytes = 256 << 20
)

// OpenMemory opens a journal held in this process's memory only: runs do not survive
// the process, but everything else works as with a database (the same checks, leases,
// fencing and errors). It keeps each run's records as they were appended, in a slice
// per run, so that an open run costs the journal little more than its records' bytes,
// and keeps finished runs within limits (the oldest go first).
func OpenMemory(_ context.Context, limits ...MemoryLimits) (Store, error) {
	var l MemoryLimits
	if len(limits) > 0 {
		l = limits[0]
	}
	if l.FinishedRuns <= 0 {
		l.FinishedRuns = DefaultFinishedRuns
	}
	if l.FinishedBytes <= 0 {
		l.FinishedBytes = DefaultFinishedBytes
	}
	return &memStore{runs: map[string]*memRun{}, workers: map[string]map[string]int64{}, now: time.Now, limits: l}, nil
}

// memStore is the journal in memory. Times are kept as nanoseconds since the epoch, as
// the SQL stores keep them, so that every store reports the same values.
type memStore struct {
	mu      sync.RWMutex
	runs    map[string]*memRun
	workers map[string]map[string]int64 // owner → worker id → when it was noted
	now     func() time.Time
	closed  bool
	limits  MemoryLimits
	// finished are the finished runs' ids, the oldest first, and finishedBytes what they
	// hold (memRun.bytes).
	finished      []string
	finishedBytes int64
}

type memRun struct {
	state   State
	owner   string
	epoch   int64
	until   int64
	created int64
	updated int64
	note    string
	records []Record
	// bytes is what the run holds: its records (stored), and, once it finished, its
	// state and decisions (finishedRun).
	bytes     int64
	decisions map[string]Decision
}

var _ Store = (*memStore)(nil)

func (r *memRun) run(id string) Run {
	return Run{ID: id, State: r.state, Owner: r.owner, Epoch: r.epoch, Until: time.Unix(0, r.until),
		Records: int64(len(r.records)), Created: time.Unix(0, r.created), Updated: time.Unix(0, r.updated), Note: r.note}
}

// add appends records, which hold size bytes (stored), to the run.
func (r *memRun) add(records []Record, size int64) {
	r.records = append(r.records, records...)
	r.bytes += size
}

// recordSize is what the store holds of a record besides its data; runSize what it
// holds of a run besides its records, id and decisions (its state, its entry in the runs'
// map, its place in the finished runs' order); decisionSize what it holds of a decision
// besides its strings. All count in MemoryLimits.FinishedBytes.
const (
	recordSize   = int64(unsafe.Sizeof(Record{}))
	runSize      = int64(unsafe.Sizeof(memRun{})) + 64
	decisionSize = int64(unsafe.Sizeof(Decision{})) + 64
)

// finished notes that run id finished and drops the oldest finished runs beyond the
// limits. The caller holds the write lock.
func (s *memStore) finishedRun(id string, r *memRun) {
	// A finished run's records grow no more: their array, which grew by doubling, is
	// copied to one of their size.
	if cap(r.records) > len(r.records)+len(r.records)/8 {
		r.records = slices.Clone(r.records)
	}
	r.bytes += runSize + int64(len(id))
	for key, d := range r.decisions {
		r.bytes += decisionSize + int64(len(key)+len(d.Reason)+len(d.By))
	}
	s.finished = append(s.finished, id)
	s.finishedBytes += r.bytes
	for len(s.finished) > 0 && (len(s.finished) > s.limits.FinishedRuns || s.finishedBytes > s.limits.FinishedBytes) {
		old := s.finished[0]
		s.finished = s.finished[1:]
		if o, ok := s.runs[old]; ok && o.state.Terminal() {
			s.finishedBytes -= o.bytes
			delete(s.runs, old)
		}
	}
	if cap(s.finished) > 2*len(s.finished)+64 {
		s.finished = slices.Clone(s.finished) // let go of the dropped ids' array
	}
}

// Volatile reports that the journal is lost with the process.
func (s *memStore) Volatile() bool { return true }

// use runs fn under the lock, write or read, unless the store is closed, which it
// refuses saying what was done (verb) to what (id, when there is one).
func (s *memStore) use(write bool, verb, id string, fn func() error) error {
	if write {
		s.mu.Lock()
		defer s.mu.Unlock()
	} else {
		s.mu.RLock()
		defer s.mu.RUnlock()
	}
	if s.closed {
		if id != "" {
			verb += " " + id
		}
		return fmt.Errorf("runlog: %s: the store is closed", verb)
	}
	return fn()
}

// stored is records as the store keeps them, their time set, and the bytes they hold:
// their data is the caller's, which a caller does not change once it handed it over
// (Store).
func stored(lease Lease, records []Record, now int64) ([]Record, int64) {
	out := make([]Record, len(records))
	size := int64(0)
	for i, rec := range records {
		t := rec.Time.UnixNano()
		if rec.Time.IsZero() {
			t = now
		}
		data, n := kept(rec.Data)
		out[i] = Record{RunID: lease.RunID, Seq: rec.Seq, Epoch: lease.Epoch, Kind: rec.Kind, Time: time.Unix(0, t), Data: data}
		size += recordSize + n
	}
	return out, size
}

// kept is data as the store keeps it, and the bytes of its array: the caller's array
// (room included, which the store holds on to as well), unless it has much more room
// than data fills (an event encoded in a buffer with room to spare, say); then a copy.
func kept(data []byte) ([]byte, int64) {
	switch n := len(data); {
	case n == 0:
		return nil, 0
	case cap(data)-n > n/4+64:
		c := bytes.Clone(data)
		return c, int64(cap(c))
	default:
		return data[:n:n], int64(cap(data))
	}
}

func (s *memStore) Create(_ context.Context, runID, owner string, ttl time.Duration, first ...Record) (Lease, error) {
	if err := checkID("run id", runID); err != nil {
		return Lease{}, err
	}
	if err := checkID("owner", owner); err != nil {
		return Lease{}, err
	}
	now := s.now()
	lease := Lease{RunID: runID, Owner: owner, Epoch: 1, Until: time.Unix(0, now.Add(ttl).UnixNano())}
	if err := checkWrite(lease, first); err != nil {
		return Lease{}, err
	}
	if len(first) > 0 && first[0].Seq != 1 {
		return Lease{}, fmt.Errorf("%w: a run's first record has sequence number 1, not %d", ErrInvalid, first[0].Seq)
	}
	n := now.UnixNano()
	recs, size := stored(lease, first, n) // made before the lock, which every run's writes take
	err := s.use(true, "create", runID, func() error {
		if _, ok := s.runs[runID]; ok {
			return fmt.Errorf("%w: %s", ErrExists, runID)
		}
		r := &memRun{state: StateRunning, owner: owner, epoch: 1, until: lease.Until.UnixNano(), created: n, updated: n}
		r.add(recs, size)
		s.runs[runID] = r
		return nil
	})
	if err != nil {
		return Lease{}, err
	}
	return lease, nil
}

func (s *memStore) Append(_ context.Context, lease Lease, records []Record) error {
	if len(records) == 0 {
		return fmt.Errorf("%w: no records", ErrInvalid)
	}
	if err := checkWrite(lease, records); err != nil {
		return err
	}
	now := s.now().UnixNano()
	recs, size := stored(lease, records, now) // made before the lock, which every run's writes take
	return s.use(true, "append to", lease.RunID, func() error {
		r, err := s.writable(lease, records)
		if err != nil {
			return err
		}
		r.add(recs, size)
		r.updated = now
		return nil
	})
}

// writable is the run lease may write records to, or why it may not.
func (s *memStore) writable(lease Lease, records []Record) (*memRun, error) {
	r, ok := s.runs[lease.RunID]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, lease.RunID)
	case r.state != StateRunning || r.epoch != lease.Epoch || r.owner != lease.Owner:
		return nil, fmt.Errorf("%w: run %s is at epoch %d (owner %s, %s), the write was made under epoch %d", ErrFenced, lease.RunID, r.epoch, r.owner, r.state, lease.Epoch)
	case len(records) > 0 && records[0].Seq != int64(len(r.records))+1:
		return nil, fmt.Errorf("%w: run %s's next record is %d, not %d", ErrConflict, lease.RunID, len(r.records)+1, records[0].Seq)
	}
	return r, nil
}

func (s *memStore) Read(_ context.Context, runID string, after int64, limit int, kinds ...Kind) ([]Record, error) {
	var out []Record
	err := s.use(false, "read", runID, func() error {
		r, ok := s.runs[runID]
		if !ok {
			return fmt.Errorf("%w: %s", ErrNotFound, runID)
		}
		for _, rec := range r.records[min(max(after, 0), int64(len(r.records))):] {
			if len(kinds) > 0 && !slices.Contains(kinds, rec.Kind) {
				continue
			}
			rec.Data = bytes.Clone(rec.Data)
			out = append(out, rec)
			if limit > 0 && len(out) == limit {
				break
			}
		}
		return nil
	})
	return out, err
}

func (s *memStore) Last(_ context.Context, runID string, kind Kind) (Record, bool, error) {
	var out Record
	found := false
	err := s.use(false, "read", runID, func() error {
		r, ok := s.runs[runID]
		if !ok {
			return fmt.Errorf("%w: %s", ErrNotFound, runID)
		}
		for i := len(r.records) - 1; i >= 0; i-- {
			if r.records[i].Kind == kind {
				out, found = r.records[i], true
				out.Data = bytes.Clone(out.Data)
				break
			}
		}
		return nil
	})
	return out, found, err
}

func (s *memStore) Acquire(_ context.Context, runID, owner string, ttl time.Duration) (Lease, error) {
	if err := checkID("owner", owner); err != nil {
		return Lease{}, err
	}
	var l Lease
	err := s.use(true, "acquire", runID, func() error {
		r, ok := s.runs[runID]
		if !ok {
			return fmt.Errorf("%w: %s", ErrNotFound, runID)
		}
		now := s.now()
		switch {
		case r.state.Terminal():
			return fmt.Errorf("%w: %s is %s", ErrFinished, runID, r.state)
		case r.state != StateHeld && r.owner != owner && r.until > now.UnixNano():
			return fmt.Errorf("%w: %s holds %s until %s", ErrLeased, r.owner, runID, time.Unix(0, r.until).Format(time.RFC3339Nano))
		}
		l = Lease{RunID: runID, Owner: owner, Epoch: r.epoch + 1, Until: time.Unix(0, now.Add(ttl).UnixNano())}
		r.owner, r.epoch, r.until, r.updated, r.state, r.note = owner, l.Epoch, l.Until.UnixNano(), now.UnixNano(), StateRunning, ""
		return nil
	})
	return l, err
}

// holder is the run lease holds and is still running under it, or the error that says
// why not.
func (s *memStore) holder(lease Lease) (*memRun, error) {
	r, ok := s.runs[lease.RunID]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, lease.RunID)
	case r.state != StateRunning || r.owner != lease.Owner || r.epoch != lease.Epoch:
		return nil, fmt.Errorf("%w: run %s, epoch %d", ErrFenced, lease.RunID, lease.Epoch)
	}
	return r, nil
}

func (s *memStore) Renew(_ context.Context, lease Lease, ttl time.Duration) (Lease, error) {
	err := s.use(true, "renew", lease.RunID, func() error {
		r, err := s.holder(lease)
		if err != nil {
			return err
		}
		now := s.now()
		lease.Until = time.Unix(0, now.Add(ttl).UnixNano())
		r.until, r.updated = lease.Until.UnixNano(), now.UnixNano()
		return nil
	})
	if err != nil {
		return Lease{}, err
	}
	return lease, nil
}

func (s *memStore) RenewAll(_ context.Context, leases []Lease, ttl time.Duration, key string) []Renewal {
	if out := checkRenewals(leases); out != nil {
		return out
	}
	out := make([]Renewal, len(leases))
	err := s.use(true, "renew", "", func() error {
		now := s.now()
		until := time.Unix(0, now.Add(ttl).UnixNano())
		for i, lease := range leases {
			r, err := s.holder(lease)
			if err != nil {
				out[i].Err = ErrRenewAlone // Renew says why
				continue
			}
			r.until, r.updated = until.UnixNano(), now.UnixNano()
			lease.Until = until
			out[i].Lease = lease
			out[i].Decision, out[i].Decided = r.decisions[key]
		}
		return nil
	})
	if err != nil {
		for i := range out {
			out[i] = Renewal{Err: err}
		}
	}
	return out
}

func (s *memStore) Finish(_ context.Context, lease Lease, state State, last ...Record) error {
	if !state.Terminal() {
		return fmt.Errorf("%w: %q is not a finished run's state", ErrInvalid, state)
	}
	if err := checkWrite(lease, last); err != nil {
		return err
	}
	now := s.now().UnixNano()
	recs, size := stored(lease, last, now)
	return s.use(true, "finish", lease.RunID, func() error {
		r, err := s.writable(lease, last)
		if err != nil {
			return err
		}
		r.add(recs, size)
		r.state, r.until, r.updated = state, 0, now
		s.finishedRun(lease.RunID, r)
		return nil
	})
}

func (s *memStore) Hold(_ context.Context, lease Lease, reason string) error {
	if err := checkNote(reason); err != nil {
		return err
	}
	return s.use(true, "hold", lease.RunID, func() error {
		r, err := s.holder(lease)
		if err != nil {
			return err
		}
		r.state, r.until, r.updated, r.note = StateHeld, 0, s.now().UnixNano(), reason
		return nil
	})
}

func (s *memStore) Get(_ context.Context, runID string) (Run, error) {
	var out Run
	err := s.use(false, "get", runID, func() error {
		r, ok := s.runs[runID]
		if !ok {
			return fmt.Errorf("%w: %s", ErrNotFound, runID)
		}
		out = r.run(runID)
		return nil
	})
	return out, err
}

// selectRuns returns the runs keep accepts, ordered by less, at most limit (0: MaxList).
func (s *memStore) selectRuns(what string, limit int, keep func(id string, r *memRun) bool, less func(a, b Run) int) ([]Run, error) {
	var out []Run
	err := s.use(false, what, "", func() error {
		for id, r := range s.runs {
			if keep(id, r) {
				out = append(out, r.run(id))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, less)
	return out[:min(len(out), listLimit(limit))], nil
}

func byID(a, b Run) int { return cmp.Compare(a.ID, b.ID) }

func (s *memStore) List(_ context.Context, f Filter) ([]Run, error) {
	return s.selectRuns("list", f.Limit, func(id string, r *memRun) bool {
		return id > f.After && r.state.matches(f.State)
	}, byID)
}

func (s *memStore) Expired(_ context.Context, limit int) ([]Run, error) {
	now := s.now().UnixNano()
	return s.selectRuns("list", limit, func(_ string, r *memRun) bool {
		return r.state == StateRunning && r.until < now
	}, func(a, b Run) int { return cmp.Or(a.Until.Compare(b.Until), byID(a, b)) })
}

func (s *memStore) Decide(_ context.Context, runID, key string, d Decision) error {
	if err := checkDecision(runID, key, d); err != nil {
		return err
	}
	return s.use(true, "decide on", runID, func() error {
		r, ok := s.runs[runID]
		switch {
		case !ok:
			return fmt.Errorf("%w: %s", ErrNotFound, runID)
		case r.state.Terminal():
			return fmt.Errorf("%w: run %s is %s", ErrFinished, runID, r.state)
		}
		if _, ok := r.decisions[key]; ok {
			return fmt.Errorf("%w: the call %s of run %s is decided already", ErrExists, key, runID)
		}
		if r.decisions == nil {
			r.decisions = map[string]Decision{}
		}
		d.Time = time.Unix(0, s.now().UnixNano())
		r.decisions[key] = d
		return nil
	})
}

func (s *memStore) Decision(_ context.Context, runID, key string) (Decision, bool, error) {
	var d Decision
	var found bool
	err := s.use(false, "read a decision of", runID, func() error {
		if r, ok := s.runs[runID]; ok {
			d, found = r.decisions[key]
		}
		return nil
	})
	return d, found, err
}

func (s *memStore) Prune(_ context.Context, before time.Time, limit int) (int, error) {
	n := 0
	err := s.use(true, "prune", "", func() error {
		var ids []string
		cut := before.UnixNano()
		for id, r := range s.runs {
			if r.state.Terminal() && r.updated < cut {
				ids = append(ids, id)
			}
		}
		// The oldest first, as the SQL stores take them.
		slices.SortFunc(ids, func(a, b string) int {
			return cmp.Or(cmp.Compare(s.runs[a].updated, s.runs[b].updated), cmp.Compare(a, b))
		})
		gone := map[string]bool{}
		for _, id := range ids[:min(len(ids), listLimit(limit))] {
			s.finishedBytes -= s.runs[id].bytes
			delete(s.runs, id)
			gone[id] = true
			n++
		}
		if len(gone) > 0 {
			s.finished = slices.DeleteFunc(s.finished, func(id string) bool { return gone[id] })
		}
		return nil
	})
	return n, err
}

func (s *memStore) SetWorkers(_ context.Context, owner string, workers []string) error {
	if err := checkWorkers(owner, workers); err != nil {
		return err
	}
	return s.use(true, "noting the workers of", owner, func() error {
		now := s.now().UnixNano()
		m := make(map[string]int64, len(workers))
		for _, w := range workers {
			m[w] = now
		}
		s.workers[owner] = m
		return nil
	})
}

func (s *memStore) Workers(_ context.Context, since time.Time) ([]string, error) {
	var out []string
	err := s.use(false, "reading the known workers", "", func() error {
		cut := since.UnixNano()
		for _, m := range s.workers {
			for w, seen := range m {
				if seen >= cut {
					out = append(out, w)
				}
			}
		}
		return nil
	})
	slices.Sort(out)
	out = slices.Compact(out)
	return out[:min(len(out), MaxWorkers)], err
}

func (s *memStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
