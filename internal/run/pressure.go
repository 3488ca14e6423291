package run

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// FullError refuses a run because its tenant runs its maximum of runs (ErrTenantFull)
// or the orchestrator runs its own (ErrFull). RetryAfter is when the caller should try
// again: it grows with how often the bound was hit lately against how often a run
// ended, so that callers who honour it spread their retries over the time the bound
// takes to admit them instead of hammering it once a second.
type FullError struct {
	// Tenant is the tenant at its bound; "" for the orchestrator's own bound.
	Tenant     string
	Max        int
	RetryAfter time.Duration
}

func (e *FullError) Error() string {
	if e.Tenant == "" {
		return ErrFull.Error()
	}
	return fmt.Sprintf("%v: tenant %q is running its maximum of %d runs", ErrTenantFull, e.Tenant, e.Max)
}

// Is makes errors.Is(err, ErrTenantFull) and errors.Is(err, ErrFull) hold as before.
func (e *FullError) Is(target error) bool {
	if e.Tenant == "" {
		return target == ErrFull
	}
	return target == ErrTenantFull
}

// RetryDelay is the delay a refusal of err suggests; zero when err is no FullError.
func RetryDelay(err error) time.Duration {
	var fe *FullError
	if errors.As(err, &fe) {
		return fe.RetryAfter
	}
	return 0
}

// The bounds of a refusal's suggested delay, and how long the rates it is computed
// from remember.
const (
	minRetryDelay = time.Second
	maxRetryDelay = 30 * time.Second
	pressureTau   = 5 * time.Second
)

// pressure is how hard callers push against one bound: refusals and ends of runs, each
// a rate that decays with pressureTau.
type pressure struct {
	refused, ended decaying
}

// decaying is an exponentially decaying count of events; rate is events per second.
type decaying struct {
	v    float64
	last time.Time
}

func (d *decaying) decayTo(now time.Time) {
	if !d.last.IsZero() {
		d.v *= math.Exp(-now.Sub(d.last).Seconds() / pressureTau.Seconds())
	}
	d.last = now
}

func (d *decaying) add(now time.Time) {
	d.decayTo(now)
	d.v++
}

func (d *decaying) rate(now time.Time) float64 {
	d.decayTo(now)
	return d.v / pressureTau.Seconds()
}

// refuse counts a refusal at a bound of slots runs and returns the delay to suggest:
// refusals per second over ends of runs per second (how many callers wait for each
// slot that frees, in seconds), between minRetryDelay and maxRetryDelay, with a fifth
// of jitter so that callers refused together do not come back together. Runs are
// taken to end at least once per maxRetryDelay per slot, so that a bound whose runs
// have not ended lately still suggests a finite wait.
func (p *pressure) refuse(now time.Time, slots int) time.Duration {
	p.refused.add(now)
	ended := math.Max(p.ended.rate(now), float64(slots)/maxRetryDelay.Seconds())
	d := time.Duration(p.refused.rate(now) / ended * float64(time.Second))
	d = min(max(d, minRetryDelay), maxRetryDelay)
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}
