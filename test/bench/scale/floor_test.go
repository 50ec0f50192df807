package scale

import (
	"testing"

	"palisade.dev/palisade/fencing"
)

// The floor writes as many nodes at once as the controller advances fences, its flag read as
// the controller's flag package reads it.
func TestFloorConcurrency(t *testing.T) {
	for args, want := range map[string]int{
		"":                       fencing.DefaultConcurrency,
		"--fence-concurrency=40": 40,
		"-fence-concurrency=25":  25,
		"--fence-concurrency 30": 30,
		"--fence-concurrency=20 --pprof-bind-address=:0 -fence-concurrency 12": 12, // the last one counts
		"--fence-concurrency=0": fencing.DefaultConcurrency, // the controller's default
		"--log-level=debug":     fencing.DefaultConcurrency,
	} {
		if got, err := floorConcurrency(args); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", args, got, err, want)
		}
	}
	for _, args := range []string{"--fence-concurrency=many", "--fence-concurrency=-1", "--fence-concurrency"} {
		if n, err := floorConcurrency(args); err == nil {
			t.Errorf("%q: %d, want an error", args, n)
		}
	}
}
