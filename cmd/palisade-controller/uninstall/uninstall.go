package uninstall

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/sight"
	"palisade.dev/palisade/fencing"
)

// Options name the release's controller and what it created.
type Options struct {
	// Namespace is the controller's: its Deployment, the agents' CA Secret and ConfigMap and
	// the fencing-token Lease are there.
	Namespace string
	// Deployment is the controller's Deployment, scaled to 0 first; "" skips that step.
	Deployment string
	// StopTimeout bounds the wait for the controller's pods to be gone.
	StopTimeout time.Duration
	// LeaderElectionNamespace holds the leader-election Lease; "" when leader election is off.
	LeaderElectionNamespace string
	// AgentCASecret and AgentCAConfigMap are the agents' CA and its published bundle; "" when
	// the controller made none.
	AgentCASecret, AgentCAConfigMap string
	// AgentSigner is the signer of the agents' CertificateSigningRequests, which are deleted;
	// "" when there were no agents.
	AgentSigner string
	// Log gets a line for each thing done, and for each fenced node left fenced.
	Log logr.Logger
}

// ParseFlags reads the options of `palisade-controller uninstall` (args after "uninstall").
func ParseFlags(args []string) (Options, error) {
	o := Options{}
	fs := flag.NewFlagSet("palisade-controller uninstall", flag.ContinueOnError)
	fs.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the controller's namespace (default $POD_NAMESPACE)")
	fs.StringVar(&o.Deployment, "deployment", "", `the controller's Deployment, scaled to 0 before anything else ("" skips that)`)
	fs.DurationVar(&o.StopTimeout, "stop-timeout", 2*time.Minute, "how long the controller's pods may take to stop")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", `namespace of the leader-election Lease ("": leader election was off)`)
	fs.StringVar(&o.AgentCASecret, "agent-ca-secret", "", `the agents' CA Secret, in the controller's namespace ("": none)`)
	fs.StringVar(&o.AgentCAConfigMap, "agent-ca-configmap", "", `the ConfigMap publishing the agents' CA bundle ("": none)`)
	fs.StringVar(&o.AgentSigner, "agent-signer", "", `signer name of the agents' CertificateSigningRequests, deleted ("": none)`)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.Namespace == "" {
		return o, errors.New("--namespace (or $POD_NAMESPACE) must name the controller's namespace")
	}
	return o, nil
}

// Run stops the controller, releases the nodes from Palisade's finalizer and annotation and
// deletes the controller's objects, in that order, stopping at the first step that fails.
func Run(ctx context.Context, c client.Client, o Options) error {
	for _, step := range []func(context.Context, client.Client, Options) error{stopController, releaseNodes, deleteCreated, deleteAgentCSRs} {
		if err := step(ctx, c, o); err != nil {
			return err
		}
	}
	o.Log.Info("Palisade's run-time objects are gone; every NodeFence and FencingPolicy is kept, and fenced nodes stay fenced")
	return nil
}

// stopController scales the controller's Deployment to 0 and waits until its pods are gone: a
// running leader would put the finalizer back on every node it covers.
func stopController(ctx context.Context, c client.Client, o Options) error {
	if o.Deployment == "" {
		return nil
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Deployment}}
	log := o.Log.WithValues("Deployment", klog.KObj(d))
	scale := &autoscalingv1.Scale{}
	if err := c.SubResource("scale").Get(ctx, d, scale); apierrors.IsNotFound(err) {
		log.Info("no controller Deployment: nothing to stop")
		return nil
	} else if err != nil {
		return fmt.Errorf("reading the scale of Deployment %s: %w", klog.KObj(d), err)
	}
	selector, err := labels.Parse(scale.Status.Selector)
	if err != nil {
		return fmt.Errorf("parsing the pod selector of Deployment %s: %w", klog.KObj(d), err)
	}
	if selector.Empty() {
		return fmt.Errorf("deployment %s reports no pod selector: its pods cannot be told from others", klog.KObj(d))
	}
	if was := scale.Spec.Replicas; was > 0 {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))
		if err := c.SubResource("scale").Patch(ctx, d, patch, client.WithSubResourceBody(scale)); err != nil {
			return fmt.Errorf("scaling Deployment %s to 0: %w", klog.KObj(d), err)
		}
		log.Info("scaled the controller to 0 replicas, so that it puts nothing back; should this cleanup fail, scale it back to go on fencing",
			"replicas", was, "command", fmt.Sprintf("kubectl -n %s scale deployment %s --replicas=%d", o.Namespace, o.Deployment, was))
	}
	var left []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, o.StopTimeout, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(o.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return false, fmt.Errorf("listing the controller's pods: %w", err)
		}
		left = left[:0]
		for _, p := range pods.Items {
			left = append(left, p.Name)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the controller's pods to stop (%v still there; one on a node that is down never ends: once its machine is off, delete it with --force): %w", left, err)
	}
	log.Info("the controller is stopped")
	return nil
}

// nodePage is how many nodes one list call reads.
const nodePage = 200

// releaseNodes removes Palisade's finalizer and its agent annotation from every node that has
// them, and names the nodes that stay fenced (their out-of-service taint is left alone).
func releaseNodes(ctx context.Context, c client.Client, o Options) error {
	nodes := &corev1.NodeList{}
	released, fenced := 0, 0
	for {
		if err := c.List(ctx, nodes, client.Limit(nodePage), client.Continue(nodes.Continue)); err != nil {
			return fmt.Errorf("listing nodes: %w", err)
		}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if fencing.OutOfService(n) {
				fenced++
				o.Log.Info("node stays fenced: its out-of-service taint and its NodeFence are kept; remove the taint yourself only once the machine is repaired or rebooted",
					"Node", klog.KObj(n), "taint", v1alpha1.TaintOutOfService)
			}
			held := controllerutil.ContainsFinalizer(n, v1alpha1.FinalizerFenceOnDelete)
			_, marked := n.Annotations[v1alpha1.AnnotationAgent]
			if !held && !marked {
				continue
			}
			if err := releaseNode(ctx, c, n); err != nil {
				return err
			}
			if held {
				released++
				o.Log.Info("removed Palisade's finalizer", "Node", klog.KObj(n), "finalizer", v1alpha1.FinalizerFenceOnDelete, "deleting", n.DeletionTimestamp != nil)
			}
			if marked {
				o.Log.Info("removed Palisade's annotation", "Node", klog.KObj(n), "annotation", v1alpha1.AnnotationAgent)
			}
		}
		if nodes.Continue == "" {
			break
		}
	}
	o.Log.Info("nodes released from Palisade's finalizer", "released", released, "stayFenced", fenced)
	return nil
}

// releaseNode removes Palisade's finalizer, and no other, and its annotation marking the node
// as running an agent (v1alpha1.AnnotationAgent), under an optimistic lock: a conflict reads the
// node again and retries.
func releaseNode(ctx context.Context, c client.Client, n *corev1.Node) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		before := n.DeepCopy()
		changed := controllerutil.RemoveFinalizer(n, v1alpha1.FinalizerFenceOnDelete)
		if _, ok := n.Annotations[v1alpha1.AnnotationAgent]; ok {
			delete(n.Annotations, v1alpha1.AnnotationAgent)
			changed = true
		}
		if !changed {
			return nil
		}
		err := c.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) {
			if getErr := c.Get(ctx, client.ObjectKeyFromObject(n), n); getErr != nil {
				return getErr
			}
		}
		return err
	})
	if err := client.IgnoreNotFound(err); err != nil {
		return fmt.Errorf("removing Palisade's finalizer and annotation from node %s: %w", n.Name, err)
	}
	return nil
}

// created is an object the controller makes at run time, with its kind for the log.
type created struct {
	kind string
	obj  client.Object
}

// created lists, by name, what the controller made: the agents' CA Secret and ConfigMap
// (app/agentcerts.go), the leader-election Lease, the fencing-token Lease (fencing/token.go) and
// the sight tracker's canary Lease in kube-node-lease (detectors/sight).
func (o Options) created() []created {
	meta := func(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
	var objs []created
	if o.AgentCASecret != "" {
		objs = append(objs, created{"Secret", &corev1.Secret{ObjectMeta: meta(o.Namespace, o.AgentCASecret)}})
	}
	if o.AgentCAConfigMap != "" {
		objs = append(objs, created{"ConfigMap", &corev1.ConfigMap{ObjectMeta: meta(o.Namespace, o.AgentCAConfigMap)}})
	}
	if o.LeaderElectionNamespace != "" {
		objs = append(objs, created{"Lease", &coordinationv1.Lease{ObjectMeta: meta(o.LeaderElectionNamespace, app.LeaderElectionID)}})
	}
	return append(objs,
		created{"Lease", &coordinationv1.Lease{ObjectMeta: meta(o.Namespace, fencing.TokenLeaseName)}},
		created{"Lease", &coordinationv1.Lease{ObjectMeta: meta(lease.Namespace, sight.CanaryName)}})
}

// deleteCreated deletes each object the controller created; one already gone is fine.
func deleteCreated(ctx context.Context, c client.Client, o Options) error {
	for _, cr := range o.created() {
		err := c.Delete(ctx, cr.obj)
		switch {
		case apierrors.IsNotFound(err):
			o.Log.Info("already gone", cr.kind, klog.KObj(cr.obj))
		case err != nil:
			return fmt.Errorf("deleting %s %s: %w", cr.kind, klog.KObj(cr.obj), err)
		default:
			o.Log.Info("deleted", cr.kind, klog.KObj(cr.obj))
		}
	}
	return nil
}

// deleteAgentCSRs deletes the agents' CertificateSigningRequests, of every node: Kubernetes
// would expire them (an hour after they were signed or denied, a day while pending), but an
// uninstall leaves nothing of the release behind.
func deleteAgentCSRs(ctx context.Context, c client.Client, o Options) error {
	if o.AgentSigner == "" {
		return nil
	}
	var csrs certificatesv1.CertificateSigningRequestList
	if err := c.List(ctx, &csrs, client.MatchingFields{"spec.signerName": o.AgentSigner}); err != nil {
		return fmt.Errorf("listing the agents' CertificateSigningRequests (signer %s): %w", o.AgentSigner, err)
	}
	deleted := 0
	for i := range csrs.Items {
		csr := &csrs.Items[i]
		if csr.Spec.SignerName != o.AgentSigner { // the field selector is the API server's; make sure
			continue
		}
		if err := c.Delete(ctx, csr); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting CertificateSigningRequest %s: %w", csr.Name, err)
		}
		deleted++
	}
	o.Log.Info("deleted the agents' CertificateSigningRequests", "signer", o.AgentSigner, "deleted", deleted)
	return nil
}
