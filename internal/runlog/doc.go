// Package runlog is the run journal: for each run, an append-only sequence of records
// (the request, each model response, each dispatch and tool outcome, the events the
// client saw, state snapshots), and the run's lease.
//
// A run is driven by at most one orchestrator at a time: the one holding its lease. A
// lease has an epoch that grows with every take-over; an append carries the lease, and
// one made under a stale epoch fails with ErrFenced, so a stale owner can never write
// after another took over. Appends are also checked for their sequence numbers (the next
// record of a run is exactly one past the last): two writers racing on one run cannot
// both succeed (ErrConflict).
//
// Two stores implement it: SQLite in WAL mode (OpenSQLite, the embedded default, one
// file) and PostgreSQL (OpenPostgres, for several orchestrator replicas). Both pass the
// same conformance suite (runlogtest).
package runlog
