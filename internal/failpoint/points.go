package failpoint

// The points where the orchestrator writes or reads a run's journal, in the order a run
// reaches them. Crash tests kill the orchestrator at each (TOOLMESH_FAILPOINT) and check
// that the run resumes as docs/durability.md says it does there.
const (
	// RunCreated: a new run and its request are committed; nothing else of it is.
	RunCreated = "run-created"
	// BeforeCommit: a batch of a run's records is about to be committed.
	BeforeCommit = "journal-before-commit"
	// StoreBeforeCommit: the store's transaction holding the batches of the runs that
	// waited is written, not yet committed.
	StoreBeforeCommit = "store-before-commit"
	// StoreAfterCommit: that transaction is committed; none of its writers knows yet.
	StoreAfterCommit = "store-after-commit"
	// StoreBeforeApply: SQLite's store copies committed writes from its commit log to
	// its database, in a transaction that is about to commit.
	StoreBeforeApply = "store-before-apply"
	// AfterCommit: a batch of a run's records is committed; its events are not yet
	// delivered, and whoever waits for it is not yet woken.
	AfterCommit = "journal-after-commit"
	// BeforeModel: what the model's next request depends on is committed (but for the
	// outcomes of idempotent calls, which a resumed run sends again); the model is about
	// to be asked for its next step.
	BeforeModel = "model-before-ask"
	// ModelAnswered: the model answered; its answer is not yet recorded.
	ModelAnswered = "model-answered"
	// BeforeSend: a call's dispatch is committed; the call has not left for its worker.
	BeforeSend = "dispatch-before-send"
	// OutcomeReceived: a call's outcome came back from its worker; it is not yet
	// recorded.
	OutcomeReceived = "outcome-received"
	// ResumeAcquired: a run was taken over (its lease is this orchestrator's); its
	// journal is not yet read.
	ResumeAcquired = "resume-acquired"
	// ReplayModel: a resumed run answered a model call from the journal.
	ReplayModel = "replay-model"
	// ReplayOutcome: a resumed run answered a tool call from the journal.
	ReplayOutcome = "replay-outcome"
)

// Points lists every point, in the order a run reaches them.
var Points = []string{RunCreated, BeforeCommit, StoreBeforeCommit, StoreAfterCommit, StoreBeforeApply, AfterCommit, BeforeModel,
	ModelAnswered, BeforeSend, OutcomeReceived, ResumeAcquired, ReplayModel, ReplayOutcome}
