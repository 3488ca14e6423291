package peer

// FloodCounts is what bench/cmd/flood saw, the JSON line it prints at its end.
type FloodCounts struct {
	Admitted        int64 `json:"runs_admitted"`
	Refused         int64 `json:"runs_refused"`
	BigRefused      int64 `json:"big_requests_refused"`
	BigAccepted     int64 `json:"big_requests_accepted"`
	HistoryRefused  int64 `json:"long_histories_refused"`
	HistoryAccepted int64 `json:"long_histories_accepted"`
	Errors          int64 `json:"other_errors"`
	// CPUSeconds is the flood process's own CPU time (user and system), Seconds how long
	// it flooded: the share of the machine the flood itself took from the orchestrator.
	CPUSeconds float64 `json:"cpu_seconds"`
	Seconds    float64 `json:"seconds"`
	LastError  string  `json:"last_error,omitempty"`
}
