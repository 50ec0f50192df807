package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"palisade.dev/palisade/test/testbed/containerd"
	"palisade.dev/palisade/test/testbed/ipmisim"
)

func sha256Of(data []byte) [32]byte { return sha256.Sum256(data) }

var containerSeq atomic.Int64

// ctrRun runs a container of image in ctd with ctr run (the image's user, environment and
// entrypoint unless args replace the whole command line) and returns what it printed; extra
// are ctr run's flags.
func ctrRun(ctx context.Context, ctd *containerd.Containerd, image string, extra []string, args ...string) (string, error) {
	id := fmt.Sprintf("palisade-images-%d", containerSeq.Add(1))
	// runc's state and the I/O FIFOs under ctd's directory, which its Stop cleans, not in
	// /run/containerd.
	ctrArgs := append([]string{"run", "--rm", "--snapshotter", "native",
		"--runc-root", filepath.Join(ctd.Dir, "runc"), "--fifo-dir", filepath.Join(ctd.Dir, "fifo")}, extra...)
	out, err := ctd.Ctr(ctx, append(append(ctrArgs, image, id), args...)...)
	return string(out), err
}

// runInContainerd imports both tarballs into a real containerd (ctr images import, as a node
// would) and runs them: in the controller's image, ipmitool found through PATH as the chart
// calls it (its libraries resolve) and the controller's usage, both as 65532 (busybox from the
// host, mounted, tells who runs); in the agent's, its usage and its executor's beside it, and
// the chart's kubelet stop command's /bin/sh and nsenter. The controller's ipmitool also asks a
// real BMC (ipmi_sim on the host's network) for its power over RMCP+, as bmclib runs it: cipher
// suite 3, the password in the environment, so OpenSSL's libcrypto works in the image too.
func runInContainerd(t *testing.T, ctx context.Context, ctl, agent built) {
	bmc, err := ipmisim.Start(ctx, ipmisim.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("starting ipmi_sim (run make deps): %v", err)
	}
	t.Cleanup(func() { _ = bmc.Stop() })
	ctd := containerd.StartT(t)
	for _, b := range []built{ctl, agent} {
		if _, err := ctd.Ctr(ctx, "images", "import", "--snapshotter", "native", b.Tarball); err != nil {
			t.Fatalf("%v\n%s", err, ctd.LogTail(20))
		}
		out, err := ctd.Ctr(ctx, "images", "list", "name=="+b.Ref.String())
		if err != nil || !strings.Contains(string(out), b.Ref.String()) {
			t.Fatalf("ctr images list after importing %s: %v\n%s", b.Tarball, err, out)
		}
		t.Logf("imported %s (image ID %s, digest %s):\n%s", b.Tarball, b.ImageID, b.Digest, out)
	}
	probe := []string{"--mount", "type=bind,src=" + containerd.BusyboxPath + ",dst=/probe/busybox,options=rbind:ro"}
	tests := []struct {
		name  string
		image built
		extra []string
		args  []string
		want  []string
	}{
		{"ipmitool -V", ctl, nil, []string{"ipmitool", "-V"}, []string{"ipmitool version 1.8"}},
		{"controller --help", ctl, nil, []string{"palisade-controller", "--help"}, []string{"-ipmitool", "-leader-elect"}},
		{"controller user", ctl, probe, []string{"/probe/busybox", "id"}, []string{"uid=65532(nonroot) gid=65532(nonroot)"}},
		{"ipmitool lanplus", ctl, []string{"--net-host", "--env", "IPMITOOL_PASSWORD=" + bmc.Password()},
			[]string{"ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", fmt.Sprint(bmc.Port()), "-U", bmc.Username(), "-E", "-C", "3",
				"chassis", "power", "status"}, []string{"Chassis Power is on"}},
		{"agent --help", agent, nil, []string{"palisade-agent", "--help"}, []string{"-executor-binary", "-kubelet-stop-command"}},
		{"executor beside the agent", agent, nil, []string{"/usr/local/bin/palisade-executor", "--help"}, []string{"Usage"}},
		{"agent user", agent, nil, []string{"/bin/busybox", "id", "-u"}, []string{"0"}},
		// The chart's --kubelet-stop-command, as the executor runs it, into the container's
		// own PID 1 (the chart's pod has the host's PID namespace, and is privileged).
		{"kubelet stop command", agent, []string{"--privileged"},
			[]string{"/bin/sh", "-c", "nsenter -t 1 -m -- busybox echo entered"}, []string{"entered"}},
	}
	for _, tc := range tests {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			out, err := ctrRun(ctx, ctd, tc.image.Ref.String(), tc.extra, tc.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, ctd.LogTail(10))
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("%s printed %q, want %q in it", strings.Join(tc.args, " "), out, w)
				}
			}
		})
	}
}
