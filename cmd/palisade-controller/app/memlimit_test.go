package app

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// TestCgroupMemoryLimit reads limits from cgroup trees written in a temporary directory, in
// the layouts of cgroup v2, v1 and the hybrid of both (what TestSetMemoryLimitInARealCgroup
// cannot meet on one machine).
func TestCgroupMemoryLimit(t *testing.T) {
	tests := []struct {
		name    string
		self    string            // /proc/self/cgroup
		files   map[string]string // under the cgroup root
		want    int64
		wantErr bool
	}{
		{"v2", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "268435456\n"}, 268435456, false},
		{"v2 without a limit", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "max\n"}, 0, false},
		{"v2 in a cgroup namespace: the mount's root", "0::/\n", map[string]string{"memory.max": "1048576"}, 1048576, false},
		{"v2, a host path not under the mount", "0::/kubepods/pod1/c1\n", map[string]string{"memory.max": "1048576"}, 1048576, false},
		{"v2, no memory controller", "0::/a\n", map[string]string{"a/cpu.max": "max"}, 0, false},
		{"v1", "4:memory:/kubepods/pod1/c1\n3:cpu,cpuacct:/kubepods/pod1/c1\n",
			map[string]string{"memory/kubepods/pod1/c1/memory.limit_in_bytes": "134217728"}, 134217728, false},
		{"v1 without a limit", "4:memory:/a\n", map[string]string{"memory/a/memory.limit_in_bytes": "9223372036854771712"}, 0, false},
		{"v1 memory with another controller", "4:cpu,memory:/a\n", map[string]string{"memory/a/memory.limit_in_bytes": "4096"}, 4096, false},
		{"hybrid: v1's memory controller decides", "4:memory:/a\n0::/\n",
			map[string]string{"memory/a/memory.limit_in_bytes": "8192", "memory.max": "max"}, 8192, false},
		{"garbage", "0::/a\n", map[string]string{"a/memory.max": "lots"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tt.files {
				path := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			self := filepath.Join(t.TempDir(), "cgroup")
			if err := os.WriteFile(self, []byte(tt.self), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := cgroupMemoryLimit(root, self)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("cgroupMemoryLimit = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// memlimitChildEnv makes the test binary a child that runs SetMemoryLimit and prints what it
// set and the runtime's limit after it.
const memlimitChildEnv = "PALISADE_MEMLIMIT_CHILD"

// TestSetMemoryLimitInARealCgroup runs a process in a memory cgroup of this machine with a
// 200 MiB limit: SetMemoryLimit gives its runtime 90 % of that; with GOMEMLIMIT set it leaves
// the operator's value; in a cgroup without a limit it sets none.
func TestSetMemoryLimitInARealCgroup(t *testing.T) {
	if os.Getenv(memlimitChildEnv) != "" {
		set, err := SetMemoryLimit("/sys/fs/cgroup")
		fmt.Printf("set=%d runtime=%d err=%v\n", set, debug.SetMemoryLimit(-1), err)
		return
	}
	const limit = 200 << 20
	limited := newMemoryCgroup(t, limit)
	unlimited := newMemoryCgroup(t, 0)
	tests := []struct {
		name, cgroup, gomemlimit string
		want                     string
	}{
		{"limited", limited, "", fmt.Sprintf("set=%d runtime=%d err=<nil>", int64(limit*MemoryLimitRatio), int64(limit*MemoryLimitRatio))},
		{"limited, GOMEMLIMIT set", limited, "64MiB", fmt.Sprintf("set=0 runtime=%d err=<nil>", 64<<20)},
		{"unlimited", unlimited, "", fmt.Sprintf("set=0 runtime=%d err=<nil>", int64(^uint64(0)>>1))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The shell moves itself into the cgroup, then becomes the test binary.
			cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run='^TestSetMemoryLimitInARealCgroup$'`,
				"sh", tt.cgroup, os.Args[0])
			cmd.Env = append(os.Environ(), memlimitChildEnv+"=1", "GOMEMLIMIT="+tt.gomemlimit)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child in %s: %v\n%s", tt.cgroup, err, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("child in %s printed\n%s\nwant %q", tt.cgroup, out, tt.want)
			}
		})
	}
}

// gcPercentChildEnv makes the test binary a child that runs SetGCPercent and prints what it set
// and the runtime's target after it.
const gcPercentChildEnv = "PALISADE_GCPERCENT_CHILD"

// TestSetGCPercent: without GOGC the controller's process collects at GCPercent; with GOGC set
// (off included) the operator's value stands.
func TestSetGCPercent(t *testing.T) {
	if os.Getenv(gcPercentChildEnv) != "" {
		set := SetGCPercent()
		fmt.Printf("set=%d runtime=%d\n", set, debug.SetGCPercent(-1))
		return
	}
	for gogc, want := range map[string]string{"": fmt.Sprintf("set=%d runtime=%d", GCPercent, GCPercent),
		"200": "set=0 runtime=200", "off": "set=0 runtime=-1"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSetGCPercent$")
		cmd.Env = append(os.Environ(), gcPercentChildEnv+"=1", "GOGC="+gogc)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child with GOGC=%q: %v\n%s", gogc, err, out)
		}
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("child with GOGC=%q printed\n%s\nwant %q", gogc, out, want)
		}
	}
}

// newMemoryCgroup creates a memory cgroup below this process's own (v1's memory hierarchy,
// or v2's), with limit bytes (0: none), removed at the end of the test.
func newMemoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var dir, file string
	for _, line := range strings.Split(string(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if strings.Contains(","+parts[1]+",", ",memory,") {
			dir, file = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.limit_in_bytes"
			break
		}
		if parts[0] == "0" && parts[1] == "" {
			dir, file = filepath.Join("/sys/fs/cgroup", parts[2]), "memory.max"
		}
	}
	if dir == "" {
		t.Fatalf("no memory cgroup in /proc/self/cgroup:\n%s", self)
	}
	dir = filepath.Join(dir, "palisade-memlimit-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(limit, 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("creating a memory cgroup (the test needs root and a writable cgroup hierarchy): %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing cgroup %s: %v", dir, err)
		}
	})
	if limit > 0 {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			t.Fatalf("setting the cgroup's memory limit: %v", err)
		}
	}
	return dir
}
