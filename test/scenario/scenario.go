package scenario

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/ipmisim"
	"palisade.dev/palisade/test/testbed/simnode"
)

// Names used by the scene.
const (
	SecretNamespace = "palisade-system"
	SecretName      = "bmc-credentials"
	PolicyName      = "default"
)

// Options shape the scene.
type Options struct {
	// Nodes is how many simulated nodes; default 3.
	Nodes int
	// LeaseRenewInterval of the simulated kubelets; default 10s (the kubelet's).
	LeaseRenewInterval time.Duration
	// LeaseTimeout of the policy; default the policy's default.
	LeaseTimeout time.Duration
	// NodeMonitorGracePeriod of kube-controller-manager; 0 keeps its default.
	NodeMonitorGracePeriod time.Duration
	// KCMFlags are appended to kube-controller-manager's flags.
	KCMFlags []string
	// Policy, when set, edits the FencingPolicy before it is created.
	Policy func(*v1alpha1.FencingPolicy)
	// NoPolicy creates no FencingPolicy.
	NoPolicy bool
	// Agents runs a real palisade-agent per node (see agents), and StartController serves
	// their heartbeats.
	Agents bool
	// Node, when set, edits each simulated node's options before it starts (i from 1).
	Node func(i int, o *simnode.Options)
	// CSIAddons runs the real csi-addons NetworkFence chain in the test bed (testbed.Options).
	CSIAddons bool
	// AgentInterval is the agents' heartbeat interval; default 1s (the agent's default).
	AgentInterval time.Duration
	// VolumeHandle is the database's volume handle (its CSI PersistentVolume's), such as the
	// EBS volume ID a cloud's test bed holds; default "vol-db-0".
	VolumeHandle string
	Logf         func(format string, args ...any)
}

// Node is a simulated node and its BMC.
type Node struct {
	*simnode.Node
	BMC *ipmisim.BMC
}

// Env is a running scene.
type Env struct {
	Cluster *testbed.Cluster
	Nodes   []*Node
	Policy  *v1alpha1.FencingPolicy
	opts    Options
	dir     string
	ctl     *controller
	agents  *agents
	// logFiles are the controller logs opened by StartController, closed by Stop.
	logFiles []*os.File
}

// controllerLog is the in-process controller's log in the scene's directory.
const controllerLog = "controller.log"

// ControllerLogTail returns the last n lines of the in-process controller's log (every
// controller started in this scene, in order), for a failing test's message.
func (e *Env) ControllerLogTail(n int) string {
	return testbed.TailFile(filepath.Join(e.dir, controllerLog), n)
}

// ControllerLog is the whole of the in-process controllers' log ("" when it goes to stderr).
func (e *Env) ControllerLog() string {
	b, _ := os.ReadFile(filepath.Join(e.dir, controllerLog))
	return string(b)
}

// Start builds the scene; Stop tears it down.
func Start(ctx context.Context, o Options) (env *Env, err error) {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.AgentInterval == 0 {
		o.AgentInterval = time.Second
	}
	e := &Env{opts: o}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Stop())
		}
	}()
	if e.dir, err = os.MkdirTemp("", "palisade-scenario-"); err != nil {
		return nil, err
	}
	if e.Cluster, err = testbed.Start(ctx, testbed.Options{NodeMonitorGracePeriod: o.NodeMonitorGracePeriod, ExtraKCMFlags: o.KCMFlags, CSIAddons: o.CSIAddons, Logf: o.Logf}); err != nil {
		return nil, err
	}
	if err = e.createSecret(ctx); err != nil {
		return nil, err
	}
	for i := 1; i <= o.Nodes; i++ {
		if err = e.addNode(ctx, i); err != nil {
			return nil, err
		}
	}
	if !o.NoPolicy {
		if err = e.createPolicy(ctx); err != nil {
			return nil, err
		}
	}
	if o.Agents {
		if err = e.startAgents(ctx); err != nil {
			return nil, fmt.Errorf("starting agents: %w", err)
		}
	}
	return e, nil
}

// addNode starts node i and its BMC. The node's kubelet reports an SMBIOS UUID of its own,
// which its BMC sends as its system GUID least significant byte first, as the IPMI
// specification has it: every IPMI fence of a scene checks that the BMC is the node's machine.
func (e *Env) addNode(ctx context.Context, i int) error {
	name := fmt.Sprintf("node-%d", i)
	systemUUID, guid, err := machineIdentity()
	if err != nil {
		return err
	}
	bmc, err := ipmisim.Start(ctx, ipmisim.Options{Dir: filepath.Join(e.dir, name+"-bmc"), GUID: guid})
	if err != nil {
		return fmt.Errorf("starting BMC of %s: %w", name, err)
	}
	n := &Node{BMC: bmc}
	e.Nodes = append(e.Nodes, n)
	// The node runs until Stop, not until the start's own deadline.
	so := simnode.Options{
		Name: name, Power: bmc, LeaseRenewInterval: e.opts.LeaseRenewInterval, Logf: e.opts.Logf,
		Annotations: map[string]string{v1alpha1.AnnotationBMCAddress: bmc.Address()},
		Labels:      map[string]string{"palisade.dev/fenced-by": "ipmi"},
		SystemUUID:  systemUUID,
	}
	if e.opts.Node != nil {
		e.opts.Node(i, &so)
	}
	n.Node, err = simnode.Start(context.WithoutCancel(ctx), e.Cluster.Kube, so)
	if err != nil {
		return fmt.Errorf("starting node %s: %w", name, err)
	}
	return nil
}

// machineIdentity makes up a machine's SMBIOS UUID (random, version 4) as a kubelet reports it,
// and the GUID its BMC sends: the same 16 bytes reversed, as 32 hex digits.
func machineIdentity() (systemUUID, guid string, err error) {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return "", "", fmt.Errorf("making up a machine's UUID: %w", err)
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	systemUUID = fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	slices.Reverse(u[:])
	return systemUUID, hex.EncodeToString(u[:]), nil
}

func (e *Env) createSecret(ctx context.Context) error {
	c := e.Cluster.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SecretNamespace}}); err != nil {
		return fmt.Errorf("creating namespace: %w", err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: SecretNamespace, Name: SecretName},
		StringData: map[string]string{"username": "admin", "password": "secret"}}
	if err := c.Create(ctx, s); err != nil {
		return fmt.Errorf("creating BMC secret: %w", err)
	}
	return nil
}

// NewPolicy is the scene's FencingPolicy: IPMI power-off with a 30s timeout.
func NewPolicy(leaseTimeout time.Duration) *v1alpha1.FencingPolicy {
	p := &v1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: v1alpha1.FencingPolicySpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"palisade.dev/fenced-by": "ipmi"}},
			Methods: []v1alpha1.Method{{
				Name: "ipmi", Type: v1alpha1.MethodIPMI, Timeout: &metav1.Duration{Duration: 30 * time.Second},
				IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: SecretNamespace, Name: SecretName}},
			}},
		},
	}
	if leaseTimeout > 0 {
		p.Spec.Detection.LeaseTimeout = &metav1.Duration{Duration: leaseTimeout}
	}
	return p
}

func (e *Env) createPolicy(ctx context.Context) error {
	p := NewPolicy(e.opts.LeaseTimeout)
	if e.opts.Policy != nil {
		e.opts.Policy(p)
	}
	if err := e.Cluster.Client.Create(ctx, p); err != nil {
		return fmt.Errorf("creating policy: %w", err)
	}
	e.Policy = p
	return nil
}

// Node returns the simulated node by its 1-based index.
func (e *Env) Node(i int) *Node { return e.Nodes[i-1] }

// controller is Palisade's controller running in this process.
type controller struct {
	cancel context.CancelFunc
	done   chan error
}

// StartController runs Palisade's controller in-process (no leader election, no listeners).
// edit, when set, changes its options (tests inject faults through NewClient).
func (e *Env) StartController(ctx context.Context, edit func(*app.Options)) error {
	if e.ctl != nil {
		return errors.New("controller already running")
	}
	o := app.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true}
	if e.agents != nil {
		o.Agents = e.agents.opts
	}
	if edit != nil {
		edit(&o)
	}
	// The controller's logs go to stderr with PALISADE_TEST_LOG=1; otherwise to the scene's
	// controller.log, which ControllerLogTail and ControllerLog read. The manager gets its own
	// logger: controller-runtime's global one keeps the first scene's of the process.
	log := logr.Discard()
	if os.Getenv("PALISADE_TEST_LOG") != "" {
		log = zap.New(zap.UseDevMode(true))
	} else if f, err := os.OpenFile(filepath.Join(e.dir, controllerLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		e.logFiles = append(e.logFiles, f)
		log = zap.New(zap.WriteTo(f))
	}
	ctrl.SetLogger(log)
	o.Logger = log
	mgr, err := app.NewManager(e.Cluster.Config, o)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	c := &controller{cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- mgr.Start(ctrl.LoggerInto(cctx, log)) }()
	e.ctl = c
	return nil
}

// StopController stops the in-process controller and waits for it: a controller killed.
func (e *Env) StopController() error {
	if e.ctl == nil {
		return nil
	}
	e.ctl.cancel()
	err := <-e.ctl.done
	e.ctl = nil
	return err
}

// Stop tears everything down, controller first and control plane last.
func (e *Env) Stop() error {
	errs := []error{e.StopController()}
	if e.agents != nil {
		e.agents.stopAll()
	}
	for _, n := range e.Nodes {
		if n.Node != nil {
			n.Node.Stop()
		}
		errs = append(errs, n.BMC.Stop())
	}
	if e.Cluster != nil {
		errs = append(errs, e.Cluster.Stop())
	}
	for _, f := range e.logFiles {
		_ = f.Close()
	}
	if e.dir != "" {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	return errors.Join(errs...)
}
