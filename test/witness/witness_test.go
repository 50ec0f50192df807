package witness_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/witness"
)

// The real witness-client, twice under one pod name: run one after the other, the history
// shows a clean handover; run at once, the checker finds two copies of the pet.
func TestWitnessClientsAndTheOneCopyCheck(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "witness-client")
	build := exec.Command("go", "build", "-o", bin, "../cmd/witness-client")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building witness-client: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name    string
		overlap bool
	}{{"one after the other", false}, {"both at once", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url, store, quiet := serve(t)
			a := startClient(t, bin, url, "uid-a")
			time.Sleep(time.Second)
			if !tc.overlap {
				stopClient(t, a)
			}
			b := startClient(t, bin, url, "uid-b")
			time.Sleep(time.Second)
			stopClient(t, b)
			if tc.overlap {
				stopClient(t, a)
			}
			// A write a client sent just before its exit may still be in the store's
			// handler: the history is read once the server has finished every request.
			quiet()
			h, err := store.History()
			if err != nil {
				t.Fatal(err)
			}
			checkIndexes(t, store, h)
			v := checker.OneCopy(h, 0)
			t.Logf("%d records; %s", len(h), checker.Report(v))
			if len(h) < 15 {
				t.Errorf("only %d records for two writers writing for a second each at 10 per second", len(h))
			}
			if got := len(v) > 0; got != tc.overlap {
				t.Errorf("violations %v, want some: %v", v, tc.overlap)
			}
		})
	}
}

// checkIndexes checks the store's FirstAppend and LastAppend against its history.
func checkIndexes(t *testing.T, store *witness.Store, h []witness.Record) {
	t.Helper()
	first, last := map[string]witness.Record{}, map[string]time.Time{}
	for _, r := range h {
		if r.Kind != witness.KindAppend {
			continue
		}
		if _, ok := first[r.PodUID]; !ok {
			first[r.PodUID] = r
		}
		last[r.Pod] = r.Arrival
	}
	for _, uid := range []string{"uid-a", "uid-b"} {
		got, ok := store.FirstAppend(uid)
		if !ok || got.Seq != first[uid].Seq {
			t.Errorf("FirstAppend(%s) = %+v, %v; the history's first: %+v", uid, got, ok, first[uid])
		}
	}
	if _, ok := store.FirstAppend("uid-none"); ok {
		t.Error("FirstAppend of a UID that never wrote found one")
	}
	for pod, want := range last {
		if got := store.LastAppend(pod); !got.Equal(want) {
			t.Errorf("LastAppend(%s) = %s, the history's last %s", pod, got, want)
		}
	}
}

// serve runs a store on loopback and returns its URL, and a function that stops the server
// once every request in flight has been answered.
func serve(t *testing.T) (string, *witness.Store, func()) {
	t.Helper()
	store, err := witness.NewStore(filepath.Join(t.TempDir(), "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: store.Handler(), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	quiet := func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("stopping the store's server: %v", err)
		}
	}
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		_ = store.Close()
	})
	return "http://" + ln.Addr().String(), store, quiet
}

func startClient(t *testing.T, bin, url, uid string) *exec.Cmd {
	t.Helper()
	boot := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(boot, []byte("boot-"+uid+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"WITNESS_URL=" + url, "POD_NAME=db-0", "POD_UID=" + uid, "NODE_NAME=node-" + uid, "BOOT_ID_FILE=" + boot}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// stopClient sends SIGTERM and expects a clean exit.
func stopClient(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("witness-client did not exit cleanly on SIGTERM: %v", err)
	}
}
