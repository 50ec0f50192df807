package child

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/providers/executor/protocol"
)

// pod is a kept spec of n containers whose preStop hooks take about hook bytes each.
func pod(name string, n, hook int) protocol.Pod {
	p := protocol.Pod{Metadata: protocol.PodMetadata{Namespace: "default", Name: name, UID: "uid-" + name}, KeptAt: time.Now()}
	for i := range n {
		script, _ := json.Marshal(strings.Repeat("x", hook))
		p.Spec.Containers = append(p.Spec.Containers, protocol.Container{Name: fmt.Sprint("c", i),
			Lifecycle: &protocol.Lifecycle{PreStop: json.RawMessage(`{"exec":{"command":["sh","-c",` + string(script) + `]}}`)}})
	}
	return p
}

// TestFitPods: the specs of a full node (110 pods) of usual size go whole in one request; when
// some are so large that they would overflow the executor's line, the largest are left out and
// named, the rest go in their order, and the request fits protocol.MaxLine either way.
func TestFitPods(t *testing.T) {
	t.Parallel()
	var usual []protocol.Pod
	for i := range 110 {
		usual = append(usual, pod(fmt.Sprint("p", i), 3, 200))
	}
	huge := append([]protocol.Pod{pod("huge-1", 2, 300<<10)}, usual[:50]...)
	huge = append(huge, pod("huge-2", 2, 250<<10), pod("huge-3", 1, 250<<10))
	huge = append(huge, usual[50:]...)
	for _, tc := range []struct {
		name     string
		pods     []protocol.Pod
		wantLeft []string
	}{
		{name: "110 usual pods", pods: usual},
		{name: "three huge ones among them", pods: huge, wantLeft: []string{"default/huge-1", "default/huge-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fit, left := FitPods(tc.pods)
			if diff := cmp.Diff(tc.wantLeft, left); diff != "" {
				t.Errorf("left out (-want +got):\n%s", diff)
			}
			var want []string
			for _, p := range tc.pods {
				if !slices.Contains(tc.wantLeft, "default/"+p.Metadata.Name) {
					want = append(want, p.Metadata.Name)
				}
			}
			var got []string
			for _, p := range fit {
				got = append(got, p.Metadata.Name)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("sent (-want +got):\n%s", diff)
			}
			line, err := json.Marshal(protocol.Request{ID: 1 << 40, Op: protocol.OpTerminate, Deadline: time.Now(), Command: strings.Repeat("c", 200),
				GracePeriodSeconds: new(int64(30)), Pods: fit})
			if err != nil || len(line) >= protocol.MaxLine {
				t.Errorf("request line of %d bytes (%v), want under %d", len(line), err, protocol.MaxLine)
			}
			t.Logf("MEASURED request line of %d pods: %d bytes", len(fit), len(line))
		})
	}
}
