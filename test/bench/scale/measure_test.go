package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/testbed"
)

const (
	rackSize    = 40
	rackTimeout = 5 * time.Minute
	clockTicks  = 100 // USER_HZ of /proc/PID/stat on Linux
)

func kubernetesFor(b *testing.B, cfg *rest.Config) kubernetes.Interface {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return kube
}

// createPolicy covers every simulated node with the Executor method: the node's agent
// terminates its workload and confirms by read-back (the simulated agent confirms at once).
func createPolicy(ctx context.Context, c *testbed.Cluster) error {
	p := &v1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "scale"},
		Spec: v1alpha1.FencingPolicySpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"palisade.dev/scale": "true"}},
			Methods: []v1alpha1.Method{{Name: "executor", Type: v1alpha1.MethodExecutor,
				Timeout: &metav1.Duration{Duration: 30 * time.Second}, Executor: &v1alpha1.ExecutorMethod{}}},
		},
	}
	if err := c.Client.Create(ctx, p); err != nil {
		return fmt.Errorf("creating policy: %w", err)
	}
	return nil
}

// sample is the controller's cumulative counters at one moment.
type sample struct {
	at       time.Time
	cpuTicks float64
	rssKiB   float64
	// rssFileKiB is the part of the RSS backed by files (the binary's pages), peakKiB the
	// highest RSS since the controller started (VmHWM).
	rssFileKiB, peakKiB float64
	// requests are the controller's API requests so far by series (method and code).
	requests map[string]float64
	// openFiles is how many files (sockets among them) the controller has open.
	openFiles int
	// reconciles are the controller's reconciles so far by series (controller and result).
	reconciles map[string]float64
}

type steadyState struct {
	rssMiB, cpuPct, apiQPS, hbP99ms float64
}

func (p *controller) sample(b *testing.B) sample {
	pid := p.cmd.Process.Pid
	s := sample{at: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("reading the controller's stat (did it exit?): %v", err)
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64) // field 14 of stat, utime
	st, _ := strconv.ParseFloat(f[12], 64) // field 15, stime
	s.cpuTicks = ut + st
	if s.rssKiB, s.rssFileKiB, s.peakKiB, err = p.memoryKiB(); err != nil {
		b.Fatal(err)
	}
	s.requests = p.series(b, "rest_client_requests_total")
	s.reconciles = p.series(b, "controller_runtime_reconcile_total")
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		b.Fatal(err)
	}
	s.openFiles = len(fds)
	return s
}

// memoryKiB reads the controller's RSS, its part backed by files, and its peak RSS (VmHWM).
func (p *controller) memoryKiB() (rss, file, peak float64, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		for key, to := range map[string]*float64{"VmRSS:": &rss, "RssFile:": &file, "VmHWM:": &peak} {
			if v, ok := strings.CutPrefix(line, key); ok {
				*to, _ = strconv.ParseFloat(strings.Fields(v)[0], 64)
			}
		}
	}
	return rss, file, peak, nil
}

// memory says the RSS, its part backed by files, and the peak so far.
func (s sample) memory() string {
	return fmt.Sprintf("%.1f MiB (%.1f MiB of it the binary's and other files' pages), %.1f MiB at its peak since the controller started",
		s.rssKiB/1024, s.rssFileKiB/1024, s.peakKiB/1024)
}

// scrape sums the series of metric on the controller's metrics endpoint whose labels hold label
// ("": every series).
func (p *controller) scrape(b *testing.B, metric, label string) float64 {
	var sum float64
	for labels, v := range p.series(b, metric) {
		if strings.Contains(labels, label) {
			sum += v
		}
	}
	return sum
}

// series reads every series of metric on the controller's metrics endpoint, by its labels.
func (p *controller) series(b *testing.B, metric string) map[string]float64 {
	out, err := p.readSeries(metric)
	if err != nil {
		b.Fatalf("scraping the controller's metrics: %v", err)
	}
	return out
}

// readSeries is series, returning its error.
func (p *controller) readSeries(metric string) (map[string]float64, error) {
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, _ := strconv.ParseFloat(line[i+1:], 64)
		out[strings.TrimPrefix(line[:i], metric)] += v
	}
	return out, sc.Err()
}

// delta is what each series of s1 gained since s0, the largest first, as "labels: n" lines
// (series that did not move left out), and the total.
func delta(s0, s1 map[string]float64) (string, float64) {
	type gain struct {
		series string
		n      float64
	}
	var gains []gain
	var total float64
	for k, v := range s1 {
		if d := v - s0[k]; d > 0 {
			gains = append(gains, gain{k, d})
			total += d
		}
	}
	sort.Slice(gains, func(i, j int) bool {
		return gains[i].n > gains[j].n || gains[i].n == gains[j].n && gains[i].series < gains[j].series
	})
	var out strings.Builder
	for _, g := range gains {
		fmt.Fprintf(&out, "\n\t%s: %.0f", g.series, g.n)
	}
	return out.String(), total
}

// steady measures the controller over window: its RSS at the end, its CPU and API request
// rate over the window, and the agents' heartbeat round-trip p99 within it.
func (p *controller) steady(ctx context.Context, b *testing.B, kube kubernetes.Interface, window time.Duration, lat *latencies) steadyState {
	_, _, _ = lat.reset()
	s0 := p.sample(b)
	load0 := takeLoad(ctx, kube)
	p.wait(b, window)
	s1 := p.sample(b)
	load1 := takeLoad(ctx, kube)
	p99, count, errs := lat.reset()
	secs := s1.at.Sub(s0.at).Seconds()
	loadBetween(b, "steady window "+window.String(), load0, load1)
	b.Logf("steady window %s: %d heartbeats, %d failed; the controller has %d files open", window, count, errs, s1.openFiles)
	b.Logf("steady window %s: RSS %s", window, s1.memory())
	bySeries, requests := delta(s0.requests, s1.requests)
	b.Logf("steady window %s: %.0f API requests by the controller, by method and code:%s", window, requests, bySeries)
	byController, reconciles := delta(s0.reconciles, s1.reconciles)
	b.Logf("steady window %s: %.0f reconciles (%.0f a second), by controller and result:%s", window, reconciles, reconciles/secs, byController)
	return steadyState{
		rssMiB:  s1.rssKiB / 1024,
		cpuPct:  100 * (s1.cpuTicks - s0.cpuTicks) / clockTicks / secs,
		apiQPS:  requests / secs,
		hbP99ms: float64(p99.Microseconds()) / 1000,
	}
}

// rackTimes are the rack's release times: from all its fences confirmed, from all their verify
// windows ended (the policy's wait after a confirmation, no work of the controller's), and from
// the request, to all of them Released with every pod of theirs gone.
type rackTimes struct{ fromConfirmed, afterWindows, fromRequest time.Duration }

// rackRelease asks for the fence of rackSize nodes at once (the fence-request annotation, the
// README's manual request) and times its release. Moments are polled every 100 ms, one list of
// the NodeFences a poll: each is an upper bound by at most a poll's length (logged).
func rackRelease(ctx context.Context, b *testing.B, c *testbed.Cluster, kube kubernetes.Interface, n int) rackTimes {
	rack := map[string]bool{}
	for i := 0; i < rackSize; i++ {
		rack[nodeName(n-1-i)] = true
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"bench-scale rack"}}}`, v1alpha1.AnnotationFenceRequest)
	if err := forEach(rackSize, func(i int) error {
		_, err := kube.CoreV1().Nodes().Patch(ctx, nodeName(n-1-i), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}); err != nil {
		b.Fatalf("requesting the rack's fences: %v", err)
	}
	requested := time.Now()
	deadline := requested.Add(rackTimeout)
	var confirmed, windowsEnded time.Time
	counted := false          // the rack's pods were counted, and some were left
	var slowest time.Duration // the longest poll: the moments are upper bounds by at most that
	failed := 0               // polls that failed: the API server, busy with the rack's writes, may time one out
	for time.Now().Before(deadline) {
		began := time.Now()
		p, err := rackPhases(ctx, c, rack)
		if err != nil {
			if failed++; failed == 1 || failed%50 == 0 {
				b.Logf("polling the rack failed (%d so far), polling on: %v", failed, err)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		now := time.Now()
		slowest = max(slowest, now.Sub(began))
		if confirmed.IsZero() && p.fenced == rackSize {
			confirmed = now
		}
		if windowsEnded.IsZero() && p.verified == rackSize {
			windowsEnded = now
		}
		// The pods are counted only once every fence is Released (40 lists of a node's pods
		// take long enough on a busy API server to blur the other moments): a Released fence
		// deleted them, and the rack ends when none is left.
		if p.released == rackSize {
			countBegan := time.Now()
			left, err := podsLeft(ctx, kube, rack)
			if err == nil && left == 0 {
				end := now // no pod left at the first count: the rack ended with its last Released
				if counted {
					end = time.Now()
				}
				b.Logf("the rack: %d polls failed, the longest poll took %s, counting the rack's pods %s", failed,
					slowest.Round(time.Millisecond), time.Since(countBegan).Round(time.Millisecond))
				logRackTimeline(ctx, b, c, rack, requested)
				return rackTimes{fromConfirmed: end.Sub(confirmed), afterWindows: end.Sub(windowsEnded), fromRequest: end.Sub(requested)}
			} else if err != nil {
				failed++
			}
			counted = err == nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	p, err := rackPhases(ctx, c, rack)
	left, err2 := podsLeft(ctx, kube, rack)
	b.Fatalf("rack not released within %s: %d fenced, %d verified, %d released, %d pods left (%v, %v; %d polls failed)", rackTimeout, p.fenced, p.verified, p.released, left, err, err2, failed)
	return rackTimes{}
}

// logRackTimeline says where the rack's time went, from its fences' records (whole seconds,
// as the API server keeps them): when they were confirmed, how long each verify window was and
// what the longest one said, how long each release took after its window, and when they were
// released, counted from the request.
func logRackTimeline(ctx context.Context, b *testing.B, c *testbed.Cluster, rack map[string]bool, requested time.Time) {
	var list v1alpha1.NodeFenceList
	if err := c.Client.List(ctx, &list); err != nil {
		b.Logf("the rack's timeline: listing fences: %v", err)
		return
	}
	var createdAt, confirmedAt, windows, releases, releasedAt []time.Duration
	longest, said := time.Duration(-1), ""
	var order []string                                                         // the release steps' names, as first met
	took, waited := map[string][]time.Duration{}, map[string][]time.Duration{} // by step: its length, and the wait since the step before ended
	for _, f := range list.Items {
		if !rack[f.Spec.NodeName] || f.Status.FencedTime == nil || f.Status.ReleasedTime == nil {
			continue
		}
		for i, st := range f.Status.Steps {
			if i == 0 || st.EndTime == nil || f.Status.Steps[i-1].EndTime == nil || st.StartTime.Time.Before(f.Status.FencedTime.Time) {
				continue
			}
			if _, seen := took[string(st.Name)]; !seen {
				order = append(order, string(st.Name))
			}
			took[string(st.Name)] = append(took[string(st.Name)], st.EndTime.Sub(st.StartTime.Time))
			waited[string(st.Name)] = append(waited[string(st.Name)], st.StartTime.Sub(f.Status.Steps[i-1].EndTime.Time))
		}
		createdAt = append(createdAt, f.CreationTimestamp.Sub(requested))
		confirmedAt = append(confirmedAt, f.Status.FencedTime.Sub(requested))
		releasedAt = append(releasedAt, f.Status.ReleasedTime.Sub(requested))
		for _, st := range f.Status.Steps {
			if st.Name != v1alpha1.StepVerifyFenced || st.EndTime == nil {
				continue
			}
			w := st.EndTime.Sub(f.Status.FencedTime.Time)
			windows = append(windows, w)
			releases = append(releases, f.Status.ReleasedTime.Sub(st.EndTime.Time))
			if w > longest {
				longest, said = w, fmt.Sprintf("%s: %d passes, %s", f.Spec.NodeName, st.Attempts, st.Message)
			}
		}
	}
	b.Logf("the rack's timeline (whole seconds): created %s after the request, confirmed %s after the request, verify windows %s long from each confirmation, each released %s after its window, all released %s after the request; the longest window, %s",
		spread(createdAt), spread(confirmedAt), spread(windows), spread(releases), spread(releasedAt), said)
	var steps []string
	for _, name := range order {
		steps = append(steps, fmt.Sprintf("%s took %s, began %s after the step before", name, spread(took[name]), spread(waited[name])))
	}
	b.Logf("the rack's steps after each confirmation (whole seconds): %s", strings.Join(steps, "; "))
}

// spread is "min–median–max (n)" of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return fmt.Sprintf("%s–%s–%s (%d)", ds[0].Round(time.Second), ds[len(ds)/2].Round(time.Second), ds[len(ds)-1].Round(time.Second), len(ds))
}

// rackProgress counts the rack's fences confirmed (Fenced or later), past their verify window
// (the VerifyFenced step succeeded) and Released.
type rackProgress struct{ fenced, verified, released int }

func rackPhases(ctx context.Context, c *testbed.Cluster, rack map[string]bool) (rackProgress, error) {
	var list v1alpha1.NodeFenceList
	if err := c.Client.List(ctx, &list); err != nil {
		return rackProgress{}, fmt.Errorf("listing fences: %w", err)
	}
	var p rackProgress
	for _, f := range list.Items {
		if !rack[f.Spec.NodeName] {
			continue
		}
		switch f.Status.Phase {
		case v1alpha1.PhaseFenced, v1alpha1.PhaseReleasing:
			p.fenced++
		case v1alpha1.PhaseReleased:
			p.fenced++
			p.released++
		}
		for _, st := range f.Status.Steps {
			if st.Name == v1alpha1.StepVerifyFenced && st.State == v1alpha1.StepSucceeded {
				p.verified++
				break
			}
		}
	}
	return p, nil
}

func podsLeft(ctx context.Context, kube kubernetes.Interface, rack map[string]bool) (int, error) {
	left := 0
	for node := range rack {
		pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return 0, fmt.Errorf("listing the pods of %s: %w", node, err)
		}
		left += len(pods.Items)
	}
	return left, nil
}

// rackFloor is what the rack's pod writes alone take as one burst on this API server under the
// same load: for rackSize other nodes (the ones just below the rack), as many nodes at once as
// the controller advances fences (floorConcurrency), a list of the node's pods, each pod marked
// Failed with its DisruptionTarget condition (a merge patch carrying its resourceVersion and its
// conditions, as fencing's markFailed sends) and deleted with grace period 0 and its UID as
// precondition, fencing.PodWriters pods at a time, and a list again, as the DeletePods
// step does. A plain client, no controller: no NodeFence, no event, no verify window. The
// controller's release is not one burst: each fence's pods go once its own window ends, so
// rack_after_window_s (from the last window's end) can be shorter than this; rack_release_s,
// from the last confirmation, holds the windows (at least four seconds each) and the release of
// the same 2400 writes.
func rackFloor(ctx context.Context, b *testing.B, kube kubernetes.Interface, n int) time.Duration {
	first := n - 2*rackSize // the rack is the rackSize nodes at the top
	pods := kube.CoreV1().Pods("default")
	begin := time.Now()
	err := forEachOf(rackSize, fencesAtOnce(b), func(i int) error {
		sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName(first+i)}
		list, err := pods.List(ctx, sel)
		if err != nil {
			return fmt.Errorf("listing the pods of %s: %w", nodeName(first+i), err)
		}
		err = forEachOf(len(list.Items), fencing.PodWriters, func(j int) error {
			p := &list.Items[j]
			conditions := append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "DeletionByPalisade", Message: "bench-scale: the rack's floor", LastTransitionTime: metav1.Now()})
			mark, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": p.ResourceVersion},
				"status": map[string]any{"phase": corev1.PodFailed, "conditions": conditions}})
			if err != nil {
				return err
			}
			if _, err := pods.Patch(ctx, p.Name, types.MergePatchType, mark, metav1.PatchOptions{}, "status"); err != nil {
				return fmt.Errorf("marking pod %s failed: %w", p.Name, err)
			}
			if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &p.UID}}); err != nil {
				return fmt.Errorf("deleting pod %s: %w", p.Name, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if list, err = pods.List(ctx, sel); err != nil {
			return fmt.Errorf("listing the pods of %s again: %w", nodeName(first+i), err)
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d pods of %s left after their deletion", len(list.Items), nodeName(first+i))
		}
		return nil
	})
	if err != nil {
		b.Fatalf("the rack's floor: %v", err)
	}
	return time.Since(begin)
}

// floorConcurrency is how many fences the controller advances at once: the last
// --fence-concurrency in PALISADE_SCALE_CONTROLLER_ARGS (as -name=value, --name=value or
// --name value, as the controller's flags read it), else, or when it is 0 (the controller's
// "the default"), fencing.DefaultConcurrency.
func floorConcurrency(controllerArgs string) (int, error) {
	n, args := 0, strings.Fields(controllerArgs)
	for i, a := range args {
		name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "fence-concurrency" || !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasValue && i+1 < len(args) {
			v = args[i+1]
		}
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			return 0, fmt.Errorf("PALISADE_SCALE_CONTROLLER_ARGS: %s %s: want a number of fences at least 0", a, v)
		}
	}
	if n == 0 {
		return fencing.DefaultConcurrency, nil
	}
	return n, nil
}

// fencesAtOnce is floorConcurrency of the bench's PALISADE_SCALE_CONTROLLER_ARGS.
func fencesAtOnce(b *testing.B) int {
	n, err := floorConcurrency(os.Getenv("PALISADE_SCALE_CONTROLLER_ARGS"))
	if err != nil {
		b.Fatal(err)
	}
	return n
}
