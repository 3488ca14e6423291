package server

import (
	"context"
	"slices"
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
)

// How the known workers are kept in the journal: recorded when the set changes (checked
// every knownCheck) and at least every knownRefresh; a worker recorded longer than
// knownWindow ago (by a replica that went away) is no longer expected.
const (
	knownCheck   = 2 * time.Second
	knownRefresh = 30 * time.Second
	knownWindow  = 3 * knownRefresh
)

// WarmUp makes this orchestrator ready once the workers the journal knew of before it
// started (registered with it or with another replica sharing the journal, lately) have
// registered again, or registry.readiness_grace has passed: until then Ready is open,
// runs wait for it, and the process reports NOT_SERVING, so that no run starts to find
// its tools missing because their workers have not yet found the new orchestrator. An
// orchestrator whose journal is in memory, or that knows of no workers, is ready at once.
// From then on, until ctx ends, it keeps the journal's record of its workers current.
//
// WarmUp is called once, before the server serves; a Server that is never warmed up is
// ready from the start.
func (s *Server) WarmUp(ctx context.Context) {
	known := s.knownWorkers(ctx)
	ready := make(chan struct{})
	if len(known) > 0 {
		s.ready = ready
	} else {
		close(ready)
	}
	go func() {
		s.awaitWorkers(ctx, known)
		if len(known) > 0 {
			close(ready)
		}
		if s.journal != nil && !s.volatile && s.owner != "" {
			s.recordWorkers(ctx)
		}
	}()
}

// Ready is closed once the orchestrator is ready (WarmUp).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// knownWorkers are the workers the journal holds as registered lately.
func (s *Server) knownWorkers(ctx context.Context) []string {
	if s.journal == nil || s.volatile || s.cfg.Registry.ReadinessGrace <= 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	known, err := s.journal.Workers(rctx, time.Now().Add(-knownWindow))
	if err != nil {
		s.log.Warn("the journal's known workers cannot be read: ready at once", "error", err.Error())
		return nil
	}
	return known
}

// awaitWorkers waits until every known worker is registered, the grace passes or ctx
// ends.
func (s *Server) awaitWorkers(ctx context.Context, known []string) {
	if len(known) == 0 {
		s.log.Info("orchestrator ready", "known_workers", 0)
		return
	}
	start := time.Now()
	s.log.Info("orchestrator warming up: waiting for the workers registered before the start", "known_workers", len(known),
		"readiness_grace", s.cfg.Registry.ReadinessGrace.D().String())
	deadline := time.NewTimer(s.cfg.Registry.ReadinessGrace.D())
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := missingWorkers(known, s.router.WorkerIDs())
		if len(missing) == 0 {
			s.log.Info("orchestrator ready: every known worker registered again", "known_workers", len(known),
				"after", time.Since(start).Round(time.Millisecond).String())
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			s.log.Warn("orchestrator ready: readiness_grace passed before every known worker registered again", "known_workers", len(known),
				"missing", len(missing), "missing_workers", missing[:min(len(missing), 20)])
			return
		case <-ctx.Done():
			return
		}
	}
}

// missingWorkers are the known ids not among registered (both sorted).
func missingWorkers(known, registered []string) []string {
	var missing []string
	for _, id := range known {
		if _, found := slices.BinarySearch(registered, id); !found {
			missing = append(missing, id)
		}
	}
	return missing
}

// recordWorkers keeps the journal's record of this orchestrator's workers current until
// ctx ends.
func (s *Server) recordWorkers(ctx context.Context) {
	var last []string
	var lastWrite time.Time
	t := time.NewTicker(knownCheck)
	defer t.Stop()
	for {
		ids := s.router.WorkerIDs()
		if !slices.Equal(ids, last) || time.Since(lastWrite) >= knownRefresh {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := s.journal.SetWorkers(wctx, s.owner, ids)
			cancel()
			if err == nil {
				last, lastWrite = ids, time.Now()
			} else if ctx.Err() == nil {
				s.log.Warn("recording the registered workers in the journal", "error", err.Error())
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// awaitReady holds a new run until the orchestrator is ready, or ctx ends.
func (s *Server) awaitReady(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	default:
	}
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// healthEvery is how often WatchHealth asks the journal whether it works.
const healthEvery = 2 * time.Second

// WatchHealth calls set with whether the orchestrator serves runs: once it is ready
// (WarmUp), and for as long as its journal takes writes; a journal that fails (a
// PostgreSQL that went away, a SQLite file that cannot be written) makes it report
// NOT_SERVING, with the reason in the log, until it works again. It returns when ctx
// ends.
func (s *Server) WatchHealth(ctx context.Context, set func(serving bool)) {
	hr, _ := s.journal.(runlog.HealthReporter)
	select {
	case <-s.Ready():
	case <-ctx.Done():
		return
	}
	serving := false
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		var err error
		if hr != nil {
			hctx, cancel := context.WithTimeout(ctx, healthEvery)
			err = hr.Health(hctx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil && !serving:
			if s.journal != nil && hr != nil {
				s.log.Info("the journal takes writes: serving runs")
			}
			serving = true
			set(true)
		case err != nil && serving:
			s.log.Error("the journal cannot be used: NOT_SERVING until it works again", "error", err.Error())
			serving = false
			set(false)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
