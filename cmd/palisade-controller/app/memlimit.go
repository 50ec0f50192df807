package app

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// MemoryLimitRatio is the share of the container's memory limit the Go runtime aims to stay
// under; the rest is room for what the runtime does not count (and for the time the garbage
// collector takes to react).
const MemoryLimitRatio = 0.9

// GCPercent is the garbage collector's target the controller runs with unless GOGC is set: a
// collection when the heap has grown by half of what was live after the last, not by all of it
// (Go's default, 100). Most of what the controller holds lives long (its cache of Nodes and
// Leases, the agents' keys and heartbeats), and at 5000 nodes the collector took about 5 % of
// its CPU at 100 (make bench-scale's CPU profile), so the lower target costs little CPU and
// keeps a quarter of its heap's goal out of memory: 122.1 and 124.7 MiB of RSS against 143.3 in
// one run at 100, for 1.1–1.7 % of a core more (make bench-scale, 5000 nodes, 2026-11-30).
const GCPercent = 50

// SetGCPercent sets the garbage collector's target to GCPercent, unless GOGC is set (the
// operator's choice), and returns the target it set (0: none, GOGC's stands).
func SetGCPercent() int {
	if os.Getenv("GOGC") != "" {
		return 0
	}
	debug.SetGCPercent(GCPercent)
	return GCPercent
}

// unlimitedV1 is the smallest value cgroup v1 reports for "no limit" (the page-rounded
// largest int64).
const unlimitedV1 = 1 << 62

// SetMemoryLimit gives the Go runtime a soft memory limit of MemoryLimitRatio of the memory
// limit of the process's cgroup (v2, or v1's memory controller), read from the hierarchy
// mounted at root (/sys/fs/cgroup), so that the garbage collector works harder as the
// controller nears its container's limit instead of being killed at it. It does nothing when
// GOMEMLIMIT is set (the operator's choice) or the cgroup has no limit, and returns the limit
// it set (0: none).
func SetMemoryLimit(root string) (int64, error) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	limit, err := cgroupMemoryLimit(root, "/proc/self/cgroup")
	if err != nil || limit == 0 {
		return 0, err
	}
	soft := int64(float64(limit) * MemoryLimitRatio)
	debug.SetMemoryLimit(soft)
	return soft, nil
}

// cgroupMemoryLimit is the memory limit in bytes of the cgroup that procCgroup (a
// /proc/<pid>/cgroup file) names, 0 when it has none. It reads cgroup v2's memory.max, or v1's
// memory.limit_in_bytes when the memory controller is on a v1 hierarchy. Inside a cgroup
// namespace the process's own cgroup is the root of the mount, so a path not found under root
// is looked for at root itself.
func cgroupMemoryLimit(root, procCgroup string) (int64, error) {
	f, err := os.Open(procCgroup)
	if err != nil {
		return 0, fmt.Errorf("reading the process's cgroup: %w", err)
	}
	defer f.Close()
	var v1, v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",memory,"):
			v1 = parts[2]
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading the process's cgroup: %w", err)
	}
	if v1 != "" {
		return readLimit(filepath.Join(root, "memory"), v1, "memory.limit_in_bytes")
	}
	if v2 != "" {
		return readLimit(root, v2, "memory.max")
	}
	return 0, nil
}

// readLimit reads file in the cgroup at path under dir (or at dir itself, see
// cgroupMemoryLimit): "max", or a v1 value of unlimitedV1 and above, is no limit.
func readLimit(dir, path, file string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, path, file))
	if errors.Is(err, fs.ErrNotExist) {
		b, err = os.ReadFile(filepath.Join(dir, file))
	}
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // no memory controller here: no limit to follow
	}
	if err != nil {
		return 0, fmt.Errorf("reading the cgroup memory limit: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading the cgroup memory limit %q in %s: %w", s, filepath.Join(dir, path, file), err)
	}
	if n <= 0 || n >= unlimitedV1 {
		return 0, nil
	}
	return n, nil
}
