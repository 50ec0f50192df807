package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/realscene"
	"palisade.dev/palisade/test/testbed/machine"
	"palisade.dev/palisade/test/testbed/netns"
)

// Environment of a chaos run (make chaos sets them).
const (
	envRuns    = "PALISADE_CHAOS_RUNS"    // how many runs; default: the fixed seeds
	envSeed    = "PALISADE_CHAOS_SEED"    // the first seed of PALISADE_CHAOS_RUNS runs (default 1)
	envVanilla = "PALISADE_CHAOS_VANILLA" // "1": Palisade off, an operator force-deletes at NotReady
	// envSelfFence "1" makes every seeded run a SelfFence run (Schedule.SelfFence).
	envSelfFence = "PALISADE_CHAOS_SELF_FENCE"
	// envRegression names one of Regressions to run alone (it overrides envRuns).
	envRegression = "PALISADE_CHAOS_REGRESSION"
	// envParallel is how many runs go at once, each with its own control plane, machines and
	// LAN (default 1: one after the other). The runs of a batch share the machine's cores,
	// which loads each one more than a run alone.
	envParallel = "PALISADE_CHAOS_PARALLEL"
	// envLeader "1" runs, of the seeds from envSeed on, only the first envRuns that draw a
	// leader fault (a seed's schedule is the same either way: make chaos RUNS=1 SEED=<n>
	// replays it).
	envLeader = "PALISADE_CHAOS_LEADER"
)

// fixedSeeds are the seeded runs of make test (which then runs every one of Regressions),
// chosen so that together they strike every kind:
// 10 a power loss and a control-plane cut of one machine while the controllers are cut from
// the API server (fenced by IPMI); 13 a power loss and the leader killed at PowerOff (fenced by
// IPMI); 26 a lying BMC, a killed agent and a killed kubelet (fenced by the Executor, the
// machine keeps its power); 40 a control-plane cut, a peer cut and an etcd cut (nothing fenced:
// the controller is blind while the API server is down, and the cut machine's peers see it);
// 56 a control-plane cut under a slow BMC (fenced by the Executor once the cut healed).
var fixedSeeds = []uint64{10, 13, 26, 40, 56}

// activeKinds are the faults the runner strikes: all of them.
var activeKinds = Kinds

const (
	// selfFenceAfter is the agents' --self-fence-after in a SelfFence run, selfFenceSafeAfter
	// its policy's safeAfter: at least what their heartbeats promise (selfFenceAfter plus the
	// watchdog's timeout) and four heartbeat intervals, else the SelfFence method does not rely
	// on them (SelfFenceNotArmed); it covers their termination's time limit too
	// (realscene.SelfFenceTerminateWithin), as it did before the watchdog was petted.
	selfFenceAfter = 10 * time.Second
	// selfFenceWatchdog is the timeout of the machines' stand-in watchdogs in a run with
	// Schedule.Watchdog: the agents then promise selfFenceAfter plus it (18 s), within
	// selfFenceSafeAfter less four intervals. Without a watchdog they promise nothing.
	selfFenceWatchdog  = 8 * time.Second
	selfFenceSafeAfter = selfFenceAfter + realscene.SelfFenceTerminateWithin + 4*time.Second + 3*time.Second
)

const (
	replicas = 3
	window   = 40 * time.Second
	// detectAfter is how long after it strikes or ends a fault may still be detected: the policy's
	// Lease timeout (20s), a kubelet renewal interval (10s) and some more.
	detectAfter = 40 * time.Second
	// holdFor is how long the faults are held, once the fences ended, for the replicas' current
	// copies to write before the heal (holdFaults).
	holdFor = 30 * time.Second
	// awaitFence is how much longer than detectAfter a machine that a fault holds down until the
	// heal is given to be fenced: on a loaded machine (three runs side by side) detection can
	// take longer, and a run healed before the fence began tests no fence at all.
	awaitFence = time.Minute
	// settleCut is how long the fences are given to end before the heal while the controllers
	// cannot reach the API server until it (their API access cut): they cannot end before it.
	settleCut = 3 * time.Minute
)

// Check (d)'s bound beyond the policy's method timeouts (fenceBound).
const (
	// executorWindow is the Executor's longest verify window by design: the kubelet's longest
	// crash back-off and 1 s after the confirmation, then three heartbeat intervals for a
	// read-back (README, "No release while the node shows life").
	executorWindow = 5*time.Minute + time.Second + 3*time.Second
	// powerWindow is any other method's: a kubelet renewal interval and 1 s after the last
	// renewal seen, the agent's three intervals, and a Lease renewal's worth more.
	powerWindow = 11*time.Second + 3*time.Second + 10*time.Second
	// releaseAllowance is the release (taint, pod deletions, attachments detached by the CSI
	// attacher), a controller restarted or a leader handed over, and the work queue's
	// back-offs, on a machine running several runs side by side.
	releaseAllowance = 2 * time.Minute
)

// fenceBound is check (d)'s bound for the fences of policy p (nil: vanilla, no fences): the
// longest a fence may take by design when every method of its chain takes its whole timeout
// and is followed by its longest verify window, and the release. With the Executor first
// (1 min) and IPMI (30 s), 8 min 58 s.
func fenceBound(p *v1alpha1.FencingPolicy) time.Duration {
	if p == nil {
		return 0
	}
	d := releaseAllowance
	for _, m := range p.Spec.Methods {
		timeout := time.Minute // the API's default
		if m.Timeout != nil {
			timeout = m.Timeout.Duration
		}
		window := powerWindow
		if m.Type == v1alpha1.MethodExecutor {
			window = executorWindow
		}
		d += timeout + window
	}
	return d
}

// TestChaos runs seeded fault schedules on three real machines running a 3-replica witness
// StatefulSet and two palisade-controller replicas, heals everything, and judges the run with
// the independent checker. A failing seed prints the command that replays it.
func TestChaos(t *testing.T) {
	schedules, vanilla := schedulesFromEnv(t)
	parallel := parallelFromEnv(t)
	var (
		mu                       sync.Mutex
		runs, violations, faults int
		leaders, struck          int // leader faults drawn, and struck
		failed                   []string
	)
	// The batch's line is printed once every run has ended: parallel runs end after this
	// function returns, before its cleanups.
	t.Cleanup(func() {
		first := uint64(0)
		if len(schedules) > 0 {
			first = schedules[0].Seed
		}
		slices.Sort(failed)
		fmt.Printf("BENCH chaos runs=%d violations=%d faults=%d seed=%d vanilla=%v parallel=%d leader_faults_struck=%d/%d\n", runs, violations, faults, first, vanilla, parallel, struck, leaders)
		if len(failed) > 0 && !vanilla {
			t.Errorf("runs with violations: %v", failed)
		}
		if vanilla && runs > 0 && violations == 0 {
			t.Error("Palisade switched off and the operator force-deleting at NotReady, yet the checker saw no violation")
		}
	})
	// At most parallel runs at once, whatever go test's -parallel (GOMAXPROCS by default).
	slots := make(chan struct{}, parallel)
	for _, s := range schedules {
		name := fmt.Sprintf("seed=%d", s.Seed)
		if s.Name != "" {
			name = "regression=" + s.Name
		}
		t.Run(name, func(t *testing.T) {
			if parallel > 1 {
				t.Parallel()
			}
			slots <- struct{}{}
			t.Cleanup(func() { <-slots }) // the first cleanup registered runs last: after the run's own
			t.Logf("%s", s)
			v, hit := run(t, s, vanilla)
			mu.Lock()
			runs, violations, faults = runs+1, violations+len(v), faults+len(s.Faults)
			leaders, struck = leaders+s.leaderFaults(), struck+hit
			if len(v) > 0 {
				failed = append(failed, name)
			}
			mu.Unlock()
			if len(v) > 0 && !vanilla {
				t.Errorf("%s\nreplay: %s", checker.Report(v), s.Replay())
			} else {
				t.Logf("%s", checker.Report(v))
			}
		})
	}
}

// parallelFromEnv is envParallel: how many runs at once (go test's -parallel must allow as
// many; make chaos passes both; TestChaos never runs more, whatever -parallel allows).
func parallelFromEnv(t *testing.T) int {
	v := os.Getenv(envParallel)
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of runs at once", envParallel, v)
	}
	return n
}

// schedulesFromEnv is what to run: the named regression (envRegression); else envRuns seeds
// from envSeed; else, for make test, the fixed seeds and every regression.
func schedulesFromEnv(t *testing.T) ([]Schedule, bool) {
	vanilla := os.Getenv(envVanilla) == "1"
	opts := Options{Machines: 3, Window: window, MaxFaults: 3, Kinds: activeKinds}
	plan := func(seeds []uint64) []Schedule {
		out := make([]Schedule, len(seeds))
		for i, seed := range seeds {
			out[i] = Plan(seed, opts)
			out[i].SelfFence = os.Getenv(envSelfFence) == "1"
			out[i].Watchdog = out[i].SelfFence
		}
		return out
	}
	regressions := make([]Schedule, len(Regressions))
	for i, s := range Regressions {
		s.Options = opts.withDefaults()
		regressions[i] = s
	}
	if name := os.Getenv(envRegression); name != "" {
		i := slices.IndexFunc(regressions, func(s Schedule) bool { return s.Name == name })
		if i < 0 {
			names := make([]string, len(regressions))
			for j, s := range regressions {
				names[j] = s.Name
			}
			t.Fatalf("%s=%q: no such regression; there are %s", envRegression, name, strings.Join(names, ", "))
		}
		return regressions[i : i+1], vanilla
	}
	n, err := strconv.Atoi(os.Getenv(envRuns))
	if os.Getenv(envRuns) == "" {
		return append(plan(fixedSeeds), regressions...), vanilla
	}
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of runs", envRuns, os.Getenv(envRuns))
	}
	first := uint64(1)
	if v := os.Getenv(envSeed); v != "" {
		if first, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", envSeed, v, err)
		}
	}
	var seeds []uint64
	for seed := first; len(seeds) < n; seed++ {
		if os.Getenv(envLeader) == "1" && Plan(seed, opts).leaderFaults() == 0 {
			continue
		}
		seeds = append(seeds, seed)
	}
	return plan(seeds), vanilla
}

// run is one seeded run: scene, faults, settle, heal, check. It returns the checker's violations
// and how many of the schedule's leader faults struck.
func run(t *testing.T, s Schedule, vanilla bool) ([]checker.Violation, int) {
	// Palisade runs as deployed: a palisade-agent on every machine, two controller replicas.
	begin := time.Now()
	o, policy := realscene.Options{Machines: s.Options.Machines, Agents: !vanilla, Volumes: true}, realscene.ExecutorFirst
	if s.SelfFence {
		o.SelfFenceAfter, policy = selfFenceAfter, selfFenceFirst
		if s.Watchdog {
			o.Watchdog = selfFenceWatchdog
		}
	}
	sc := realscene.Start(t, o)
	st := &striker{t: t, sc: sc}
	if !vanilla {
		st.bound = fenceBound(sc.CreatePolicy(t, 20*time.Second, policy))
		st.ctrls = sc.StartControllers(t, 2)
	}
	t.Logf("scene: controllers started at %s", time.Since(begin).Round(100*time.Millisecond))
	sc.DeployWitness(t, replicas)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if vanilla {
		go sc.ForceDeletingOperator(ctx, t.Logf)
	}
	start := time.Now()
	t.Logf("scene up in %s", start.Sub(begin).Round(time.Second))
	for _, f := range s.Faults {
		time.Sleep(time.Until(start.Add(f.At)))
		st.strike(ctx, f)
	}
	// The last fault to strike or end gets a Lease timeout and more to be detected and its
	// fence started, then every fence under way its time to end: only then is it healed.
	time.Sleep(time.Until(start.Add(s.Quiet() + detectAfter)))
	st.awaitFences(s, awaitFence)
	settleFrom := time.Now()
	st.settle(false)
	fences, err := st.logFences()
	if !vanilla {
		st.checkFenced(fences, err, s.Fenced)
	}
	st.holdFaults(holdFor)
	cancel()
	st.wg.Wait()
	if s.Name != "" && !vanilla {
		st.checkLeaderFaults(s)
	}
	healFrom := time.Now()
	healed := st.healAll()
	pods := make([]string, replicas)
	for i := range pods {
		pods[i] = realscene.PodName(i)
		st.waitWrite(pods[i], healed, 3*time.Minute)
	}
	// Check (d) judges every fence: one still open is given the rest of its bound to end.
	st.settle(true)
	t.Logf("phases: scene %s, faults and detection %s, fences ending and faults held %s, heal %s, replicas writing again %s",
		start.Sub(begin).Round(time.Second), settleFrom.Sub(start).Round(time.Second), healFrom.Sub(settleFrom).Round(time.Second),
		healed.Sub(healFrom).Round(time.Second), time.Since(healed).Round(time.Second))
	st.mu.Lock()
	struck := st.leaderFaults
	st.mu.Unlock()
	t.Logf("leader faults: %d of %d struck", struck, s.leaderFaults())
	// The fences before the audit: every fence listed was made before the audit is read, so
	// the audit holds it (a fence made in between is in the audit alone, never on the list
	// alone).
	fencesNow := st.fencesNow()
	audit := sc.Audit(t)
	unfences, _ := checker.JudgeUnfences(audit)
	t.Logf("check (f): %d unfences in the audit log", unfences)
	return checker.Check(checker.Input{
		History: sc.History(t), Audit: audit, Releasers: []string{realscene.ControllerUser},
		MayFence: st.mayFence(s), PowerOffs: st.powerOffs(s), FenceBound: st.bound, Outages: st.outagesNow(),
		End: time.Now(), Pods: pods, Healed: healed, Fences: fencesNow,
	}), struck
}

// selfFenceFirst is the policy of a SelfFence run: SelfFence first (a minute), then the
// Executor and IPMI. Its storm guard lets two of the three nodes be fenced at once, so that
// an island of two gets fenced rather than held back.
func selfFenceFirst(p *v1alpha1.FencingPolicy) {
	realscene.ExecutorFirst(p)
	p.Spec.Methods = append([]v1alpha1.Method{{Name: "self-fence", Type: v1alpha1.MethodSelfFence, Timeout: &metav1.Duration{Duration: time.Minute},
		SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: selfFenceSafeAfter}}}}, p.Spec.Methods...)
	two := intstr.FromInt32(2)
	p.Spec.StormGuard.MaxUnhealthy = &two
}

// striker strikes and heals faults on the scene.
type striker struct {
	t     *testing.T
	sc    *realscene.Scene
	ctrls []*realscene.Controller
	wg    sync.WaitGroup
	// kubeletKills counts the KubeletKills holding each machine's kubelet down.
	kubeletKills holds
	// struck is when a fault that may fence each machine (Schedule.MayFence) first struck it:
	// a fence of it before then is of a healthy node.
	mu     sync.Mutex
	struck map[string]time.Time
	// outages are the spans in which the controllers could not reach the API server (their
	// access cut, the API server restarting after an etcd cut).
	outages []outage
	// bound is check (d)'s bound (fenceBound).
	bound time.Duration
	// leaderFaults counts the leader kills and pauses that struck (leaderStruck).
	leaderFaults int
}

// outage is one of the striker's outages: its span (a zero To is under way), its fault's
// kind, and whether the fault holds it until the final heal.
type outage struct {
	checker.Outage
	kind Kind
	held bool
}

// outage records an outage of kind starting now and returns what ends it.
func (st *striker) outage(kind Kind, held bool) (end func()) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.outages = append(st.outages, outage{Outage: checker.Outage{From: time.Now()}, kind: kind, held: held})
	i := len(st.outages) - 1
	return func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.outages[i].To.IsZero() {
			st.outages[i].To = time.Now()
		}
	}
}

// endOutages ends every outage of kind under way (the final heal).
func (st *striker) endOutages(kind Kind) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range st.outages {
		if st.outages[i].kind == kind && st.outages[i].To.IsZero() {
			st.outages[i].To = time.Now()
		}
	}
}

// heldUntilHeal says whether an outage of kind that its fault holds until the final heal is
// under way.
func (st *striker) heldUntilHeal(kind Kind) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, o := range st.outages {
		if o.kind == kind && o.held && o.To.IsZero() {
			return true
		}
	}
	return false
}

// outagesNow are the outages so far.
func (st *striker) outagesNow() []checker.Outage {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]checker.Outage, len(st.outages))
	for i, o := range st.outages {
		out[i] = o.Outage
	}
	return out
}

// holds counts the faults holding something down: of overlapping faults on the same process,
// the first kills it and only the last to end starts it again (seed 456 drew a kill of a
// kubelet still down from an earlier one).
type holds struct {
	mu sync.Mutex
	n  map[string]int
}

// take counts one more hold on key and says whether it is the first.
func (h *holds) take(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[key]++
	return h.n[key] == 1
}

// give drops one hold on key and says whether it was the last.
func (h *holds) give(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[key]--
	return h.n[key] == 0
}

func (st *striker) strike(ctx context.Context, f Fault) {
	st.t.Logf("+%s strike: %s", f.At, f)
	if f.mayFence() {
		st.mu.Lock()
		name := realscene.NodeName(f.Machine)
		if _, seen := st.struck[name]; !seen {
			if st.struck == nil {
				st.struck = map[string]time.Time{}
			}
			st.struck[name] = time.Now() // before it strikes: no fence of it can come earlier
		}
		st.mu.Unlock()
	}
	heal := st.apply(ctx, f)
	if heal == nil || f.For == 0 {
		return
	}
	st.wg.Go(func() {
		select {
		case <-ctx.Done():
		case <-time.After(f.For):
			st.t.Logf("heal: %s", f)
			st.check(heal())
		}
	})
}

// apply strikes f and returns how to heal it alone (nil: only the final heal undoes it).
func (st *striker) apply(ctx context.Context, f Fault) func() error {
	name := realscene.NodeName(f.Machine)
	m, bmc := st.sc.Machine(name), st.sc.BMC(name)
	switch f.Kind {
	case PowerLoss:
		st.check(bmc.SetPower(false))
		return func() error { return bmc.SetPower(true) }
	// A cut's heal takes back that cut alone: another fault's cut of the machine stays.
	case ControlPlaneCut:
		st.check(st.sc.CutFromControlPlane(m))
		return func() error { return st.sc.UncutFromControlPlane(m) }
	case PeerCut:
		peer := st.sc.Machine(realscene.NodeName(f.Peer)).Net()
		st.check(m.Net().CutNodes(peer))
		return func() error { return m.Net().UncutNodes(peer) }
	case EtcdCut:
		down := f.For
		if down == 0 {
			down = 30 * time.Second
		}
		end := st.outage(EtcdCut, false)
		st.wg.Go(func() {
			st.check(st.sc.Cluster.RestartAPIServer(context.Background(), down))
			end()
		})
	case KubeletKill:
		if !m.Running() {
			return nil
		}
		if st.kubeletKills.take(name) {
			st.check(m.KillKubelet())
		}
		return func() error {
			if !st.kubeletKills.give(name) || !m.Running() {
				return nil // held down by a later kill still, or fenced (powered off) meanwhile
			}
			return m.StartKubelet()
		}
	case AgentKill:
		if !m.Running() || !m.DaemonRunning(realscene.AgentDaemon) {
			return nil // off, or no agent (vanilla)
		}
		st.check(m.KillDaemon(realscene.AgentDaemon))
		return func() error { return startAgent(m) }
	case AgentStop:
		if !m.Running() || !m.DaemonRunning(realscene.AgentDaemon) {
			return nil
		}
		st.check(m.StopDaemon(realscene.AgentDaemon))
		return func() error { return startAgent(m) }
	case LeaderKill:
		st.wg.Go(func() { st.killLeaderAt(ctx, f.Step) })
	case LeaderPause:
		st.wg.Go(func() { st.pauseLeaderAt(ctx, f.Step, f.For) })
	case LyingBMC:
		st.check(bmc.SetIgnoreOff(true))
	case SlowBMC:
		st.check(bmc.SetDelay(f.Delay))
	case ProbesInCut:
		// The cuts live in the other machines' namespaces: there, traffic to the machine's
		// probe and kubelet ports is dropped, and the replies from them; the machine's own
		// connections to their ports come from its ephemeral ports and pass.
		var others []*machine.Machine
		for i := 1; i <= len(st.sc.Machines); i++ {
			if i != f.Machine {
				others = append(others, st.sc.Machine(realscene.NodeName(i)))
			}
		}
		ip := m.Net().IP()
		for _, o := range others {
			st.check(o.Net().Cut(netns.Endpoint{IP: ip, Port: realscene.AgentProbePort}, netns.Endpoint{IP: ip, Port: realscene.KubeletPort}))
		}
		return func() error {
			var errs []error
			for _, o := range others {
				errs = append(errs, o.Net().Heal()) // every cut of o: regressions strike this alone
			}
			return errors.Join(errs...)
		}
	case HeartbeatCut:
		cut, err := st.sc.CutHeartbeats()
		st.check(err)
		if !cut || err != nil {
			return nil // vanilla: no agents
		}
		return st.sc.UncutHeartbeats
	case ControllerAPICut:
		if st.ctrls == nil {
			return nil // vanilla: no controller to cut
		}
		if err := st.sc.CutControllersFromAPI(); err != nil {
			st.check(err)
			return nil
		}
		end := st.outage(ControllerAPICut, f.For == 0)
		return func() error { // this cut alone: another fault's stays
			defer end()
			return st.sc.UncutControllersFromAPI()
		}
	}
	return nil
}

// startAgent starts the machine's agent when the machine runs and its agent does not.
func startAgent(m *machine.Machine) error {
	if !m.Running() || m.DaemonRunning(realscene.AgentDaemon) {
		return nil
	}
	return m.StartDaemon(realscene.AgentDaemon)
}

// killLeaderAt kills the leading controller once a NodeFence's step starts, and restarts it 5s
// later (its Deployment would).
func (st *striker) killLeaderAt(ctx context.Context, step v1alpha1.StepName) {
	c := st.leaderAt(ctx, step)
	if c == nil {
		return
	}
	st.t.Logf("killing the leading controller at step %s", step)
	st.leaderStruck()
	c.Kill()
	time.Sleep(5 * time.Second)
	st.check(c.Restart())
}

// pauseLeaderAt stops the leading controller once a NodeFence's step starts, and lets it go on
// d later, or at the run's end (before the heal) if that comes first.
func (st *striker) pauseLeaderAt(ctx context.Context, step v1alpha1.StepName, d time.Duration) {
	c := st.leaderAt(ctx, step)
	if c == nil {
		return
	}
	resume, err := c.Pause()
	if err != nil {
		st.check(err)
		return
	}
	st.leaderStruck()
	refusedBefore := len(logLines(c.LogPath(), notActing))
	st.t.Logf("paused the leading controller at step %s for %s", step, d)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	st.check(resume())
	st.t.Logf("the paused controller goes on (it paused at step %s)", step)
	// What it did once awake, from its log: the passes its leader check refused.
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	all := logLines(c.LogPath(), notActing)
	refused := all[min(refusedBefore, len(all)):] // the log may not be readable now
	st.t.Logf("5 s after it went on, the paused controller had refused %d passes (%q in its log) and leads: %t", len(refused), notActing, c.Leads())
	for _, l := range refused[:min(len(refused), 3)] {
		st.t.Logf("  refused: %.400s", l)
	}
}

// notActing begins the message of the controller's log line for a pass its leader check refused
// (fencing's leading.go, notLeading: a step, a recovery's decision or an unfence).
const notActing = `"msg":"not acting: `

// checkLeaderFaults fails a regression whose leader faults did not all strike (no fence reached
// their step, or no replica led then): the run did not test what it was written for.
func (st *striker) checkLeaderFaults(s Schedule) {
	want := s.leaderFaults()
	st.mu.Lock()
	got := st.leaderFaults
	st.mu.Unlock()
	if got < want {
		st.t.Errorf("%d of the regression's %d leader faults struck: the run did not take the path it was written for", got, want)
	}
}

// leaderStruck counts a leader fault that struck (a regression fails when one of its own did
// not).
func (st *striker) leaderStruck() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.leaderFaults++
}

// logLines are the lines of the file at path that contain s (none when it cannot be read).
func logLines(path, s string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// leaderAt waits until some NodeFence's step starts and returns the replica that leads then;
// nil when no fence reaches the step before the run ends, or no replica leads.
func (st *striker) leaderAt(ctx context.Context, step v1alpha1.StepName) *realscene.Controller {
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var list v1alpha1.NodeFenceList
		if err := st.sc.Cluster.Client.List(ctx, &list); err != nil {
			return false, nil
		}
		for _, nf := range list.Items {
			for _, s := range nf.Status.Steps {
				if s.Name == step {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return nil // no fence reached the step
	}
	for _, c := range st.ctrls {
		if c.Leads() {
			return c
		}
	}
	st.t.Logf("no controller leads at step %s: none struck", step)
	return nil
}

// awaitFences waits, at most d, until every machine a fault holds down or cut off from the
// control plane until the heal (power loss, control-plane cut, kubelet killed) has a NodeFence,
// and says how long it waited and which machines got none. Such a machine is usually fenced;
// not always (the storm guard, a machine with no pet), so none is not a failure.
func (st *striker) awaitFences(s Schedule, d time.Duration) {
	want := map[string]bool{}
	for _, f := range s.Faults {
		if f.For == 0 && f.mayFence() {
			want[realscene.NodeName(f.Machine)] = true
		}
	}
	if len(want) == 0 {
		return
	}
	from := time.Now()
	var missing []string
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, d, true, func(ctx context.Context) (bool, error) {
		var list v1alpha1.NodeFenceList
		if err := st.sc.Cluster.Client.List(ctx, &list); err != nil {
			return false, nil
		}
		fenced := map[string]bool{}
		for _, nf := range list.Items {
			fenced[nf.Spec.NodeName] = true
		}
		missing = missing[:0]
		for n := range want {
			if !fenced[n] {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0, nil
	})
	sort.Strings(missing)
	st.t.Logf("fences of the machines held down until the heal: waited %s more; without a fence: %v", time.Since(from).Round(time.Second), missing)
}

// settle waits until no NodeFence is under way, so that healing (power back on) cannot look
// like a fenced node coming back to life, and so that check (d) judges every fence: it gives
// each open fence the rest of its bound (st.bound, not counting the outages). It gives up
// sooner only before the heal while the controllers' API access is cut until it (settleCut).
func (st *striker) settle(healed bool) {
	var open []string
	var last []v1alpha1.Step // the last steps of the first fence under way, for the log
	var node string          // its node
	from := time.Now()
	why := ""
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*st.bound+settleCut, true, func(ctx context.Context) (bool, error) {
		var list v1alpha1.NodeFenceList
		if err := st.sc.Cluster.Client.List(ctx, &list); err != nil {
			return false, nil
		}
		open, last = open[:0], nil
		outages := st.outagesNow()
		past := 0 // open fences past their bound
		for _, nf := range list.Items {
			// Recovered comes after Released: a machine whose fault ended by itself (power back
			// on) rebooted and was unfenced before the heal.
			if nf.Status.Phase != v1alpha1.PhaseReleased && nf.Status.Phase != v1alpha1.PhaseFailed && nf.Status.Phase != v1alpha1.PhaseRecovered {
				open = append(open, fmt.Sprintf("%s %s (method %s)", nf.Spec.NodeName, nf.Status.Phase, nf.Status.Method))
				if last == nil {
					last, node = nf.Status.Steps[max(0, len(nf.Status.Steps)-3):], nf.Spec.NodeName
				}
				if checker.ActiveTime(nf.CreationTimestamp.Time, time.Now(), outages) > st.bound {
					past++
				}
			}
		}
		switch {
		case len(open) == 0:
			return true, nil
		case past == len(open):
			why = fmt.Sprintf("past their bound %s", st.bound)
			return true, nil
		case !healed && st.heldUntilHeal(ControllerAPICut) && time.Since(from) > settleCut:
			why = fmt.Sprintf("the controllers cut from the API server until the heal, after %s", settleCut)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		why = fmt.Sprintf("not ended after %s", time.Since(from).Round(time.Second))
	}
	if len(open) > 0 {
		// Check (d) judges them.
		then := "healing anyway"
		if healed {
			then = "ending the run"
		}
		st.t.Logf("settle: fences still under way, %s, %s: %v", why, then, open)
		for _, s := range last { // what the first one waits for
			st.t.Logf("settle:   %s %s %s attempts=%d: %s", s.Name, s.State, s.Reason, s.Attempts, s.Message)
		}
		if m := st.sc.Machine(node); m != nil {
			st.t.Logf("settle: the last of %s's agent log:\n%s", node, m.LogTail(realscene.AgentDaemon, 25))
		}
	}
}

// holdFaults keeps the faults in place until the current copy of every replica (the pod the API
// server holds under its name) writes, for at most d: a released pod's replacement then starts
// while its old node is still cut off, powered off or lying, so that a release made too early
// shows as two writers in the store rather than being healed away first (the old copy dies when
// its kubelet hears of the deletion at the heal).
func (st *striker) holdFaults(d time.Duration) {
	from := time.Now()
	writing := 0
	_ = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, d, true, func(ctx context.Context) (bool, error) {
		writing = 0
		for i := range replicas {
			p := &corev1.Pod{}
			if err := st.sc.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: realscene.PodName(i)}, p); err != nil || p.DeletionTimestamp != nil {
				continue
			}
			if _, ok := st.sc.Store.FirstAppend(string(p.UID)); ok {
				writing++
			}
		}
		return writing == replicas, nil
	})
	st.t.Logf("faults held %s after the fences ended: the current copies of %d of %d replicas writing", time.Since(from).Round(time.Second), writing, replicas)
}

// fencesNow names the NodeFences the API server holds now (none when it cannot list them: the
// run's end is logged with them already).
func (st *striker) fencesNow() []string {
	var list v1alpha1.NodeFenceList
	if err := st.sc.Cluster.Client.List(context.Background(), &list); err != nil {
		st.t.Logf("listing NodeFences for the audit's completeness: %v", err)
		return nil
	}
	var names []string
	for _, nf := range list.Items {
		names = append(names, nf.Name)
	}
	return names
}

// logFences says how each fence of the run ended, and returns the fences (or why it could not
// list them).
func (st *striker) logFences() ([]v1alpha1.NodeFence, error) {
	var list v1alpha1.NodeFenceList
	if err := st.sc.Cluster.Client.List(context.Background(), &list); err != nil {
		st.t.Logf("listing NodeFences: %v", err)
		return nil, err
	}
	var ends []string
	for _, nf := range list.Items {
		reason := ""
		for _, c := range nf.Status.Conditions {
			if c.Type == v1alpha1.ConditionFenced {
				reason = c.Reason
			}
		}
		ends = append(ends, fmt.Sprintf("%s %s (%s)", nf.Spec.NodeName, nf.Status.Phase, reason))
	}
	st.t.Logf("fences: %d %v", len(ends), ends)
	return list.Items, nil
}

// checkFenced fails the run unless every machine of want has one of fences (listed with
// err) released after the named method confirmed it, and no other machine has one (a
// regression's path, Schedule.Fenced).
func (st *striker) checkFenced(fences []v1alpha1.NodeFence, err error, want map[int]string) {
	if want == nil {
		return
	}
	if err != nil {
		st.t.Errorf("listing NodeFences: %v", err)
		return
	}
	byNode := map[string]*v1alpha1.NodeFence{}
	for i := range fences {
		byNode[fences[i].Spec.NodeName] = &fences[i]
	}
	for i := 1; i <= len(st.sc.Machines); i++ {
		name, nf := realscene.NodeName(i), byNode[realscene.NodeName(i)]
		method, wanted := want[i]
		// Recovered comes after Released (the machine rebooted and was unfenced).
		ok := nf == nil && !wanted || nf != nil && wanted && nf.Status.Method == method &&
			(nf.Status.Phase == v1alpha1.PhaseReleased || nf.Status.Phase == v1alpha1.PhaseRecovered)
		if ok {
			continue
		}
		got, w := "no fence", "no fence"
		if nf != nil {
			got = fmt.Sprintf("%s by %q", nf.Status.Phase, nf.Status.Method)
		}
		if wanted {
			w = fmt.Sprintf("%s by %q", v1alpha1.PhaseReleased, method)
		}
		st.t.Errorf("%s: fence %s, want %s: the run did not take the path it was written for", name, got, w)
	}
}

// healAll undoes every fault: BMCs honest and powered on, links back, kubelets and controllers
// running. It returns the moment the heal ended.
func (st *striker) healAll() time.Time {
	for i, m := range st.sc.Machines {
		bmc := st.sc.BMCs[i]
		st.check(bmc.SetIgnoreOff(false))
		st.check(bmc.SetDelay(0))
		st.check(bmc.SetPower(true))
		st.check(m.Net().Heal())
	}
	for _, m := range st.sc.Machines {
		_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return m.Running(), nil
		})
		if pids, _ := m.Processes("kubelet"); len(pids) == 0 && m.Running() {
			st.check(m.StartKubelet())
		}
		if st.ctrls != nil {
			st.check(startAgent(m))
		}
	}
	st.check(st.sc.HealControllers())
	st.endOutages(ControllerAPICut)
	for _, c := range st.ctrls {
		if !c.Running() {
			st.check(c.Restart())
		}
	}
	st.t.Logf("healed everything (%s)", st.sc.Cluster.Components())
	return time.Now()
}

// waitWrite waits for a write of pod after since (the checker judges; this only gives the
// replica its chance).
func (st *striker) waitWrite(pod string, since time.Time, timeout time.Duration) {
	_ = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return st.sc.Store.LastAppend(pod).After(since), nil
	})
}

// mayFence is Schedule.MayFence by node name, each with when it was first struck.
func (st *striker) mayFence(s Schedule) map[string]time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	m := map[string]time.Time{}
	for i := range s.MayFence() {
		m[realscene.NodeName(i)] = st.struck[realscene.NodeName(i)]
	}
	return m
}

// powerOffs are the power-off commands each BMC received (the time is not recorded).
func (st *striker) powerOffs(s Schedule) []checker.PowerOff {
	var offs []checker.PowerOff
	for i, bmc := range st.sc.BMCs {
		n, err := bmc.OffCommands()
		st.check(err)
		for range n {
			offs = append(offs, checker.PowerOff{Node: realscene.NodeName(i + 1)})
		}
	}
	return offs
}

func (st *striker) check(err error) {
	if err != nil && !strings.Contains(err.Error(), "already") {
		st.t.Errorf("chaos: %v", err)
	}
}
