package app

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LabelAgentEndpoint marks the pod of the leader, the only replica that serves the agents'
// heartbeats; the heartbeat Service selects it.
const LabelAgentEndpoint = "palisade.dev/agent-endpoint"

// PodRef names the controller's own pod (from the downward API).
type PodRef struct {
	Namespace, Name string
}

// setupAgentEndpoint routes the agents to the leader when the heartbeat server runs and the
// controller knows its pod: every replica removes LabelAgentEndpoint from its pod now, before
// it can become leader, and the leader sets it once elected.
func setupAgentEndpoint(mgr ctrl.Manager, o Options) error {
	if o.Agents.Addr == "" || o.Pod.Name == "" {
		return nil
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("building a client for the agent endpoint label: %w", err)
	}
	l := &endpointLabeler{client: c, pod: types.NamespacedName{Namespace: o.Pod.Namespace, Name: o.Pod.Name}, log: mgr.GetLogger().WithName("agent-endpoint")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.label(ctx, false); err != nil {
		return err
	}
	return mgr.Add(l)
}

// endpointLabeler is a leader-election runnable: it labels the pod once this replica leads
// and removes the label when it stops.
type endpointLabeler struct {
	client client.Client
	pod    types.NamespacedName
	log    logr.Logger
}

// NeedLeaderElection is true: only the leader carries the label.
func (l *endpointLabeler) NeedLeaderElection() bool { return true }

// Start labels the pod, retrying until it succeeds (agents cannot reach the leader before),
// then holds the label until ctx ends and removes it on a best-effort basis.
func (l *endpointLabeler) Start(ctx context.Context) error {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 10*time.Second) {
		err := l.label(ctx, true)
		if err == nil {
			l.log.Info("leading: agents' heartbeats now come to this pod", "Pod", klog.KRef(l.pod.Namespace, l.pod.Name), "label", LabelAgentEndpoint)
			break
		}
		l.log.Error(err, "labelling the leader's pod; the agents cannot reach the leader until it succeeds", "retryIn", backoff.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
	<-ctx.Done()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := l.label(rctx, false); err != nil {
		l.log.Error(err, "removing the agent endpoint label on stop; the next leader's replica start removes it")
	}
	return nil
}

// label sets (on) or removes LabelAgentEndpoint on the pod with a merge patch.
func (l *endpointLabeler) label(ctx context.Context, on bool) error {
	value := "null"
	if on {
		value = `"true"`
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+LabelAgentEndpoint+`":`+value+`}}}`))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: l.pod.Namespace, Name: l.pod.Name}}
	if err := l.client.Patch(ctx, pod, patch); err != nil {
		return fmt.Errorf("patching label %s of the controller's own pod %s (set --pod-name and --pod-namespace, or POD_NAME and POD_NAMESPACE from the downward API; the ServiceAccount needs patch on pods in its namespace): %w", LabelAgentEndpoint, l.pod, err)
	}
	return nil
}
