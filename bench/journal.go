package bench

import (
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
)

// journalRound is what a journaled variant's store did while the variant's throughput
// was measured: its commits and writes, the time the commits took, the writers' waits
// for them and, for SQLite, the commit log's writes.
type journalRound struct {
	Commits      int64   `json:"commits"`
	Writes       int64   `json:"writes"`
	CommittingUs float64 `json:"committing_us"`
	WaitedUs     float64 `json:"waited_us"`
	LoggingUs    float64 `json:"logging_us"`
}

func newJournalRound(before, after runlog.Stats) *journalRound {
	return &journalRound{Commits: after.Commits - before.Commits, Writes: after.Writes - before.Writes,
		CommittingUs: us(after.Committing - before.Committing), WaitedUs: us(after.Waited - before.Waited), LoggingUs: us(after.Logging - before.Logging)}
}

// JournalFigures are a journaled variant's commits, per run and per commit (medians over
// rounds).
type JournalFigures struct {
	CommitsPerRun   float64 `json:"commits_per_run"`
	WritesPerRun    float64 `json:"writes_per_run"`
	WritesPerCommit float64 `json:"writes_per_commit"`
	// CommitUs is a commit's time, LogUs the part of it the SQLite store spent on its
	// commit log (runlog.Stats.Logging: the entry's encoding, its write and sync).
	CommitUs float64 `json:"commit_us"`
	LogUs    float64 `json:"log_us"`
	// WaitUs is a write's wait, from its hand-over to its outcome: its commit, the
	// commit under way before it and the gathering of its group. WaitedUsPerRun is the
	// waits of a run's writes, RunUs a run's wall time at the measured concurrency
	// (concurrency / throughput).
	WaitUs         float64 `json:"wait_us"`
	WaitedUsPerRun float64 `json:"waited_us_per_run"`
	RunUs          float64 `json:"run_us"`
	// WaitShare is the share of a run's wall time its writes waited (waited / run,
	// in each round).
	WaitShare float64 `json:"wait_share"`
}

// journalFigures are the medians over rounds of the rounds' figures, nil when no round
// has any.
func journalFigures(rounds []RoundResult) *JournalFigures {
	var cpr, wpr, wpc, commit, log, wait, waited, run, share []float64
	for _, r := range rounds {
		j, th := r.Throughput.Journal, r.Throughput
		if j == nil || j.Commits <= 0 || j.Writes <= 0 || th.Calls <= 0 || th.PerSecond <= 0 {
			continue
		}
		calls := float64(th.Calls)
		cpr = append(cpr, float64(j.Commits)/calls)
		wpr = append(wpr, float64(j.Writes)/calls)
		wpc = append(wpc, float64(j.Writes)/float64(j.Commits))
		commit = append(commit, j.CommittingUs/float64(j.Commits))
		log = append(log, j.LoggingUs/float64(j.Commits))
		wait = append(wait, j.WaitedUs/float64(j.Writes))
		runUs := float64(th.Concurrency) / th.PerSecond * 1e6
		waited = append(waited, j.WaitedUs/calls)
		run = append(run, runUs)
		share = append(share, j.WaitedUs/calls/runUs)
	}
	if len(cpr) == 0 {
		return nil
	}
	return &JournalFigures{CommitsPerRun: median(cpr), WritesPerRun: median(wpr), WritesPerCommit: median(wpc), CommitUs: median(commit),
		LogUs: median(log), WaitUs: median(wait), WaitedUsPerRun: median(waited), RunUs: median(run), WaitShare: median(share)}
}

// syncProbeWrites is how many writes probeSyncWrite times, syncProbeBytes their size: a
// commit's entry at a few runs' steps. syncProbeIdle is how long the disk is left idle
// before each of the second series: about a commit's time, the time between the starts
// of two writes of the commit log under load, where each write comes after the last
// one's end and the gathering of its group.
const (
	syncProbeWrites = 200
	syncProbeBytes  = 16 << 10
	syncProbeIdle   = time.Millisecond
)

// medianDuration is the median of ds, in µs.
func medianDuration(ds []time.Duration) float64 {
	fs := make([]float64, len(ds))
	for i, d := range ds {
		fs[i] = us(d)
	}
	return median(fs)
}
