package app

import (
	"context"
	"fmt"
	csiaddonsv1alpha1 "github.com/csi-addons/kubernetes-csi-addons/api/csiaddons/v1alpha1"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"palisade.dev/palisade/attach"
	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/detectors/sight"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/ipmi"
	"palisade.dev/palisade/providers/power"
)

// Options configure the controller.
type Options struct {
	MetricsAddr        string // "0" disables
	ProbeAddr          string // "0" disables
	PprofAddr          string // Go's /debug/pprof; "" and "0" disable
	LeaderElection     bool
	LeaderElectionNS   string
	LeaseDuration      time.Duration
	RenewDeadline      time.Duration
	RetryPeriod        time.Duration
	AttachmentForceAge time.Duration
	// Logger, when set, is the manager's logger (its controllers' and reconcilers'), instead of
	// controller-runtime's global one (tests that run several managers in one process).
	Logger logr.Logger
	// FenceConcurrency is how many NodeFences advance at once, and how many nodes are looked at
	// at once (0: fencing.DefaultConcurrency).
	FenceConcurrency int
	// APICompression asks the API server to gzip its responses, watches included. Off, the
	// default: on the cluster's own network gzip costs the API server and the controller CPU
	// and adds latency (why kube-controller-manager and kube-scheduler turn it off,
	// kubernetes/kubernetes#80919); at 5000 nodes every Lease renewal reaches the controller.
	APICompression bool
	// IPMI configures the IPMI provider.
	IPMI []ipmi.Option
	// Redfish configures the Redfish provider.
	Redfish []power.Option
	// AWS configures the AWS provider.
	AWS []power.Option
	// VSphere configures the vSphere provider.
	VSphere []power.Option
	// Fencers, when set, replaces or adds the provider of a method type (tests); fencers.go
	// builds the others.
	Fencers map[v1alpha1.MethodType]providers.Fencer
	// Agents, when its Addr is set, runs the mTLS server that receives the node agents'
	// direct heartbeats; the detectors then classify nodes on them too.
	Agents channel.ServerOptions
	// AgentCerts, when its CASecret is set, issues the agents' certificates through the CSR
	// API and the heartbeat server's own (agentcerts.go).
	AgentCerts AgentCertOptions
	// Pod is the controller's own pod; the leader labels it LabelAgentEndpoint so that the
	// heartbeat Service routes agents to it (agentendpoint.go). An empty Name disables that.
	Pod PodRef
	// SkipNameValidation lets one process start the controller more than once (tests).
	SkipNameValidation bool
	// NewClient, when set, creates the manager's client (controller-runtime's option; nil:
	// its default). Tests pass one built with interceptor.NewClient to inject faults.
	NewClient client.NewClientFunc
	// leaderIdentity and leaderNamespace are this replica's identity in the leader-election
	// Lease and the Lease's namespace (leaderLock).
	leaderIdentity, leaderNamespace string
}

// Scheme holds the kinds the controller uses.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := csiaddonsv1alpha1.AddToScheme(s); err != nil { // NetworkFence, a storage fence
		return nil, err
	}
	return s, nil
}

// defaultRenewDeadline is controller-runtime's default leader-election renew deadline.
const defaultRenewDeadline = 10 * time.Second

// LeaderElectionID is the name of the replicas' leader-election Lease, in the leader-election
// namespace.
const LeaderElectionID = "palisade-controller.fencing.palisade.dev"

// NewManager builds the manager with every reconciler registered.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if o.FenceConcurrency < 0 {
		return nil, fmt.Errorf("--fence-concurrency is %d: it must be at least 1 (0 means the default, %d)", o.FenceConcurrency, fencing.DefaultConcurrency)
	}
	if o.AttachmentForceAge < 0 {
		// Negative, an attacher's first detach error would remove a VolumeAttachment's
		// finalizer at once, before the attacher had a chance to detach.
		return nil, fmt.Errorf("--attachment-force-after is %s: it must not be negative (0 means the default, %s)", o.AttachmentForceAge, attach.DefaultForceAfter)
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.DisableCompression = !o.APICompression
	lock, err := leaderLock(cfg, &o)
	if err != nil {
		return nil, err
	}
	mgr, err := whileUnreachable(setupLog(o), func() (ctrl.Manager, error) { return ctrl.NewManager(cfg, managerOptions(scheme, o, lock)) })
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if lock != nil {
		lock.LockConfig.EventRecorder = leaseEvents{mgr.GetEventRecorder("palisade-controller")} // before the elector starts
	}
	// Before setup: the heartbeat server loads the certificate files setupAgentCerts writes.
	if err := setupAgentCerts(mgr, o); err != nil {
		return nil, err
	}
	if err := setupAgentEndpoint(mgr, o); err != nil {
		return nil, err
	}
	if err := setup(mgr, o); err != nil {
		return nil, err
	}
	return mgr, nil
}

// managerOptions are the manager's options.
func managerOptions(scheme *runtime.Scheme, o Options, lock *resourcelock.LeaseLock) ctrl.Options {
	return ctrl.Options{
		Scheme:                        scheme,
		Logger:                        o.Logger,
		NewClient:                     o.NewClient,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
		// Ours, so that the reconcilers know this replica's identity in it (leader.go).
		LeaderElectionResourceLockInterface: lockOrNil(lock),
		LeaseDuration:                       durationOrNil(o.LeaseDuration),
		RenewDeadline:                       durationOrNil(o.RenewDeadline),
		RetryPeriod:                         durationOrNil(o.RetryPeriod),
		Controller:                          config.Controller{SkipNameValidation: &o.SkipNameValidation},
		Cache:                               cacheOptions(),
	}
}

// cacheOptions is what the manager's cache holds: every object without its managedFields
// (nothing reads them; every cached Node and Lease would keep them), Nodes trimmed to what
// fencing reads (nodecache.go), and the Leases of lease.Namespace only. Those are chosen by a
// field selector on the namespace, which controller-runtime turns into a list and watch of
// that one namespace (the Role the chart grants there is enough), not by ByObject.Namespaces:
// a cache restricted that way is a multi-namespace cache, which asks the REST mapper whether
// Leases are namespaced at every Get, about 27 µs a call with every group of the cluster
// mapped, more than the Get itself (make bench-scale's CPU profile at 5000 nodes: 0.10 s in
// 10 s of the node controller's 0.35 s).
func cacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Field: fields.OneTermEqualSelector("metadata.namespace", lease.Namespace)},
			&corev1.Node{}:          {Transform: trimNode},
		},
	}
}

func setup(mgr ctrl.Manager, o Options) error {
	c, reader := mgr.GetClient(), mgr.GetAPIReader()
	rec := fencing.BoundedNotes(mgr.GetEventRecorder("palisade-controller"))
	readBacks := fencing.NewReadBacks()
	obs, srv, err := agents(mgr, o, readBacks.Heard)
	if err != nil {
		return err
	}
	sa, err := agentServiceAccount(o)
	if err != nil {
		return err
	}
	policies := &fencing.PolicyReconciler{Client: c, Recorder: rec, Observer: obs}
	if err := (&fencing.NodeReconciler{Client: c, APIReader: reader, Recorder: rec, Observer: obs, Concurrency: o.FenceConcurrency, Leader: leaderCheck(reader, o),
		AgentServiceAccount: sa, WakePolicies: policies.Wake}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up node controller: %w", err)
	}
	if err := policies.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up policy controller: %w", err)
	}
	nf := &fencing.NodeFenceReconciler{
		Client: c, APIReader: reader, Recorder: rec, Fencers: fencers(mgr, o, obs, srv), Heartbeats: obs.Heartbeats, IntervalFor: obs.IntervalFor, Renewals: obs.Renewals,
		Sight:       obs.Sight,
		Attachments: &attach.Releaser{Reader: reader, Writer: c, ForceAfter: o.AttachmentForceAge},
		Tokens:      &fencing.Tokens{Reader: reader, Writer: c, Lease: types.NamespacedName{Namespace: tokenNamespace(o), Name: fencing.TokenLeaseName}},
		Concurrency: o.FenceConcurrency,
		Leader:      leaderCheck(reader, o),
	}
	if srv != nil {
		nf.ReadBacks = readBacks // told every heartbeat: a verify window's read-back wakes its fence
	}
	if err := nf.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up nodefence controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	return mgr.AddReadyzCheck("readyz", healthz.Ping)
}

// agents builds the detectors' view and, when the agents' heartbeat server is configured, the
// server (it runs on the leader only: agents must reach the active controller); heard is told
// every heartbeat the server accepts, after any OnHeartbeat of o's.
func agents(mgr ctrl.Manager, o Options, heard func(agentwire.Heartbeat)) (observe.Observer, *channel.Server, error) {
	// The controller's own sight: a canary Lease written through the client and read back
	// through the cache that holds the node Leases (invariant 3).
	tracker := sight.New(sight.Options{Client: mgr.GetClient(), Cache: mgr.GetCache()})
	if err := mgr.Add(tracker); err != nil {
		return observe.Observer{}, nil, fmt.Errorf("adding the sight tracker: %w", err)
	}
	obs := observe.Observer{Reader: mgr.GetClient(), Renewals: lease.NewRenewals(), Sight: tracker}
	if err := registerLatenessMetric(crmetrics.Registry, obs.Renewals); err != nil {
		return obs, nil, fmt.Errorf("registering the renewal lateness metric: %w", err)
	}
	if o.Agents.Addr == "" {
		return obs, nil, nil
	}
	opts := withLeaderGate(o.Agents, mgr.GetAPIReader(), o)
	opts.Logger = mgr.GetLogger().WithName("agent-heartbeats")
	if before := opts.OnHeartbeat; before != nil {
		opts.OnHeartbeat = func(hb agentwire.Heartbeat) { before(hb); heard(hb) }
	} else {
		opts.OnHeartbeat = heard
	}
	if opts.IntervalFor == nil {
		intervals, err := fencing.HeartbeatIntervals(context.Background(), mgr.GetClient(), mgr.GetCache())
		if err != nil {
			return obs, nil, err
		}
		opts.IntervalFor = intervals
	}
	srv, err := channel.NewServer(opts)
	if err != nil {
		return obs, nil, fmt.Errorf("creating the agent heartbeat server: %w", err)
	}
	if err := registerAgentMetrics(crmetrics.Registry, srv); err != nil {
		return obs, nil, fmt.Errorf("registering the agent heartbeat metrics: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(srv.Start)); err != nil {
		return obs, nil, fmt.Errorf("adding the agent heartbeat server: %w", err)
	}
	obs.Heartbeats, obs.Since, obs.IntervalFor = srv, time.Now(), opts.IntervalFor
	return obs, srv, nil
}

// withLeaderGate gives the heartbeat server, under leader election, the reconcilers' leader
// check before it hands a pending order to an agent: an order this replica set while it led is
// not handed out once it no longer does (it stood still past its lease, or lost the API server).
func withLeaderGate(opts channel.ServerOptions, reader client.Reader, o Options) channel.ServerOptions {
	if leader := leaderCheck(reader, o); leader != nil && opts.MayCommand == nil {
		opts.MayCommand = newRecentLeaderCheck(leader, orderCheckTTL, time.Now).Check
	}
	return opts
}

// tokenNamespace is where the fencing-token Lease lives: the controller's own namespace (the
// chart's Role there allows it), else the leader-election one, else "default" (a controller
// run outside a pod without either).
func tokenNamespace(o Options) string {
	for _, ns := range []string{o.Pod.Namespace, o.LeaderElectionNS} {
		if ns != "" {
			return ns
		}
	}
	return metav1.NamespaceDefault
}

func durationOrNil(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}
