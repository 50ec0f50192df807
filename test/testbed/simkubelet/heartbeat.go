package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/utils/ptr"
)

const (
	// statusReportInterval bounds the age of the Ready condition's heartbeat (as simnode's).
	statusReportInterval = time.Minute
	// maxRequestTimeout is the kubelet's heartbeat client timeout (its status update
	// frequency, 10s).
	maxRequestTimeout = 10 * time.Second
)

// heartbeat renews the Lease and keeps the Ready condition fresh.
type heartbeat struct {
	kube   kubernetes.Interface
	dialer *connrotation.Dialer
	o      options
	log    *slog.Logger

	lease    *coordinationv1.Lease // as last written
	nodeUID  types.UID
	failures failureLog
}

func newHeartbeat(o options, log *slog.Logger) (*heartbeat, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading --kubeconfig %s: %w", o.kubeconfig, err)
	}
	// Like the kubelet's heartbeat client: a request timeout, no client-side rate limit, and
	// connections it can close all at once when a renewal fails, so that a connection that
	// went silent is not reused.
	cfg.Timeout = min(max(o.renewInterval, time.Second), maxRequestTimeout)
	cfg.QPS = -1
	d := connrotation.NewDialer((&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext)
	cfg.Dial = d.DialContext
	cfg.UserAgent = "simkubelet/" + o.nodeName
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building client from --kubeconfig %s: %w", o.kubeconfig, err)
	}
	return &heartbeat{kube: kube, dialer: d, o: o, log: log, failures: failureLog{log: log}}, nil
}

// run beats at once, then every renew interval, until ctx ends.
func (h *heartbeat) run(ctx context.Context) {
	tick := time.NewTicker(h.o.renewInterval)
	defer tick.Stop()
	for {
		h.beat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// beat renews the Lease and, when that worked, the Ready condition.
func (h *heartbeat) beat(ctx context.Context) {
	err := h.renewLease(ctx)
	if ctx.Err() != nil {
		return
	}
	h.failures.report("renewing lease", err)
	if err != nil {
		h.dialer.CloseAll()
		return
	}
	err = h.syncReady(ctx)
	if ctx.Err() != nil {
		return
	}
	h.failures.report("reporting Ready", err)
}

// renewLease updates the Lease last written; after a failure it reads the Lease again, and
// creates it when missing.
func (h *heartbeat) renewLease(ctx context.Context) error {
	leases := h.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	if h.lease != nil {
		lease := h.lease.DeepCopy()
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		h.setOwner(ctx, lease)
		updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
		if err == nil {
			h.lease = updated
			return nil
		}
		h.lease = nil
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("updating lease %s/%s: %w", corev1.NamespaceNodeLease, h.o.nodeName, err)
		}
	}
	lease, err := leases.Get(ctx, h.o.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = h.newLease()
		h.setOwner(ctx, lease)
		if lease, err = leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating lease %s/%s: %w", corev1.NamespaceNodeLease, h.o.nodeName, err)
		}
		h.log.Info("created lease", "namespace", corev1.NamespaceNodeLease)
		h.lease = lease
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading lease %s/%s: %w", corev1.NamespaceNodeLease, h.o.nodeName, err)
	}
	lease = lease.DeepCopy()
	lease.Spec = h.newLease().Spec
	h.setOwner(ctx, lease)
	if lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating lease %s/%s: %w", corev1.NamespaceNodeLease, h.o.nodeName, err)
	}
	h.lease = lease
	return nil
}

// leaseDurationSeconds is the Lease duration of a kubelet that renews every renew, as simnode's:
// four intervals in whole seconds, at least one, so that the controller reads the interval.
func leaseDurationSeconds(renew time.Duration) int32 {
	return int32(max((4*renew+time.Second-1)/time.Second, 1))
}

func (h *heartbeat) newLease() *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: h.o.nodeName, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(h.o.nodeName),
			LeaseDurationSeconds: ptr.To(leaseDurationSeconds(h.o.renewInterval)),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
}

// setOwner makes the Node the owner of a lease that has none, as the kubelet does, once the
// Node exists.
func (h *heartbeat) setOwner(ctx context.Context, lease *coordinationv1.Lease) {
	if len(lease.OwnerReferences) > 0 {
		return
	}
	if h.nodeUID == "" {
		node, err := h.kube.CoreV1().Nodes().Get(ctx, h.o.nodeName, metav1.GetOptions{})
		if err != nil {
			return // not registered yet, or unreachable: the renewal says which
		}
		h.nodeUID = node.UID
	}
	lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: h.o.nodeName, UID: h.nodeUID}}
}

// syncReady sets the Node's Ready condition True with a fresh heartbeat when it is not True
// or its heartbeat is older than statusReportInterval. A Node not registered yet is left to
// whoever registers it.
func (h *heartbeat) syncReady(ctx context.Context) error {
	nodes := h.kube.CoreV1().Nodes()
	node, err := nodes.Get(ctx, h.o.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading node %s: %w", h.o.nodeName, err)
	}
	h.nodeUID = node.UID
	now := metav1.Now()
	cond, patch := readyPatch(node.Status.Conditions, now)
	if patch == nil {
		return nil
	}
	if _, err := nodes.Patch(ctx, h.o.nodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patching Ready condition of node %s: %w", h.o.nodeName, err)
	}
	if cond.LastTransitionTime.Equal(&now) {
		h.log.Info("node Ready")
	}
	return nil
}

// readyPatch returns the Ready condition to write and its strategic-merge patch of the
// Node's status, or a nil patch when conditions already say Ready with a fresh heartbeat.
// LastTransitionTime changes only when the status does.
func readyPatch(conditions []corev1.NodeCondition, now metav1.Time) (corev1.NodeCondition, []byte) {
	c := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
	}
	for _, old := range conditions {
		if old.Type != corev1.NodeReady || old.Status != corev1.ConditionTrue {
			continue
		}
		if now.Sub(old.LastHeartbeatTime.Time) < statusReportInterval {
			return old, nil
		}
		c.LastTransitionTime = old.LastTransitionTime
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if err != nil {
		panic(err) // a NodeCondition always marshals
	}
	return c, patch
}

// failureLog logs an operation when it starts failing and when it recovers, instead of
// every failure (the error of a request timing out varies from one attempt to the next).
type failureLog struct {
	log     *slog.Logger
	failing map[string]*failure
}

type failure struct {
	lastErr string
	since   time.Time
	count   int
}

func (f *failureLog) report(what string, err error) {
	if f.failing == nil {
		f.failing = map[string]*failure{}
	}
	cur := f.failing[what]
	switch {
	case err == nil && cur != nil:
		f.log.Info(what+" recovered", "failures", cur.count, "failingFor", time.Since(cur.since).Round(time.Millisecond).String(), "lastErr", cur.lastErr)
		delete(f.failing, what)
	case err != nil && cur == nil:
		f.failing[what] = &failure{lastErr: err.Error(), since: time.Now(), count: 1}
		f.log.Error(what+" failed", "err", err.Error())
	case err != nil:
		cur.lastErr = err.Error()
		cur.count++
	}
}
