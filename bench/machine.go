package bench

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// Machine describes where the benchmark ran.
type Machine struct {
	NProc       int    `json:"nproc"`
	GOMAXPROCS  int    `json:"gomaxprocs"`
	GoVersion   string `json:"go_version"`
	CPUModel    string `json:"cpu_model"`
	Kernel      string `json:"kernel"`
	MemTotal    string `json:"mem_total"`
	Commit      string `json:"commit"`
	LoadAtStart string `json:"load_at_start"`
	LoadAtEnd   string `json:"load_at_end"`
	// DiskSyncWriteUs is a synchronous 16 KiB write's time (p50) in the directory of the
	// journal variants, timed before the load, the writes back to back (0: not timed);
	// DiskSyncWriteIdleUs the same write's after the disk was idle for a millisecond, as
	// it is between two commits' writes. A virtual disk may take much longer for the
	// second: its host wakes up for a write that comes after a pause.
	DiskSyncWriteUs     float64 `json:"disk_sync_write_us,omitempty"`
	DiskSyncWriteIdleUs float64 `json:"disk_sync_write_idle_us,omitempty"`
}

func machineInfo() Machine {
	m := Machine{
		NProc:       runtime.NumCPU(),
		GOMAXPROCS:  runtime.GOMAXPROCS(0),
		GoVersion:   runtime.Version(),
		CPUModel:    procField("/proc/cpuinfo", "model name"),
		Kernel:      strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		MemTotal:    procField("/proc/meminfo", "MemTotal"),
		LoadAtStart: loadAvg(),
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
			m.Commit += " (with uncommitted changes)"
		}
	}
	return m
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	for _, line := range strings.Split(readFile(path), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
