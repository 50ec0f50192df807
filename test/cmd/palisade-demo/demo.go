package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// demoRenew is the kubelet's default Lease renewal interval; the policy keeps its default
// lease timeout (20s).
const demoRenew = 10 * time.Second

// The controller must have accepted agentBeats heartbeats from every agent within agentsTimeout
// of its start.
const (
	agentBeats    = 3
	agentsTimeout = 30 * time.Second
)

func demo(ctx context.Context, out io.Writer) (err error) {
	began := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%6.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	say("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler; 3 simulated nodes, each with its own ipmi_sim BMC and a real palisade-agent")
	env, err := scenario.Start(ctx, scenario.Options{LeaseRenewInterval: demoRenew, Agents: true})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping everything")
		if stopErr := env.Stop(); err == nil {
			err = stopErr
		}
	}()
	if err := env.StartController(ctx, nil); err != nil {
		return err
	}
	say("palisade-controller running; FencingPolicy %q: IPMI power-off, lease timeout %s", scenario.PolicyName, leaseTimeoutOf(env.Policy))
	w, err := env.DeployDatabase(ctx, env.Node(1))
	if err != nil {
		return err
	}
	n1 := env.Node(1)
	say("StatefulSet %s: pod %s Running on %s; RWO volume %s attached there (VolumeAttachment %s)",
		scenario.AppName, w.Pod.Name, n1.Name(), scenario.VolumeName, w.Attachment.Name)
	if err := waitAgents(ctx, env, say); err != nil {
		return err
	}
	say("cutting %s's power (its BMC at %s now reads Off; its kubelet and pods stop)", n1.Name(), n1.BMC.Address())
	tr, err := env.Track(ctx, n1, w.Pod, func(m scenario.Milestone, d time.Duration) {
		fmt.Fprintf(out, "           +%5.1fs  %s\n", d.Seconds(), m)
	})
	if err != nil {
		return err
	}
	defer tr.Stop()
	if err := n1.BMC.SetPower(false); err != nil {
		return err
	}
	if _, err := tr.Wait(ctx, scenario.ReplacementRunning, 2*time.Minute); err != nil {
		return err
	}
	if _, err := tr.Wait(ctx, scenario.AttachmentReleased, 30*time.Second); err != nil {
		return err
	}
	return summary(ctx, env, tr, say)
}

// waitAgents waits until the controller hears every agent and every node is probed by its
// peers: power cut earlier would leave the verdict to the Lease alone.
func waitAgents(ctx context.Context, env *scenario.Env, say func(string, ...any)) error {
	h, err := env.WaitAgentsHeard(ctx, agentBeats, agentsTimeout)
	if err != nil {
		return err
	}
	say("all %d agents heard by the controller (heartbeats every %s; each node reached by the probes of its %d peers)", h.Agents, h.Interval, h.Probers)
	return nil
}

func summary(ctx context.Context, env *scenario.Env, tr *scenario.Tracker, say func(string, ...any)) error {
	n1 := env.Node(1)
	pod, err := env.WaitPodRunning(ctx, "", n1.Name(), 10*time.Second)
	if err != nil {
		return err
	}
	nf := &v1alpha1.NodeFence{}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: n1.Name()}, nf)
		return err == nil && nf.Status.Phase == v1alpha1.PhaseReleased, client.IgnoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("waiting for NodeFence %s to be Released (phase %s): %w", n1.Name(), nf.Status.Phase, err)
	}
	say("replacement %s Running on %s", pod.Name, pod.Spec.NodeName)
	say("NodeFence %s: phase %s, method %s, trigger %s (%s)", nf.Name, nf.Status.Phase, nf.Status.Method, nf.Spec.Trigger, nf.Spec.Reason)
	for _, s := range nf.Status.Steps {
		say("  %-18s %-9s %s", s.Name, s.State, s.Message)
	}
	if ok, first := tr.ConfirmedBeforeRelease(); !ok {
		return fmt.Errorf("the first release (%s) was not preceded by a confirmed fence", first)
	}
	say("the confirmation was written before the first release (etcd revisions compared); the BMC read Off")
	return nil
}

func leaseTimeoutOf(p *v1alpha1.FencingPolicy) string {
	if p.Spec.Detection.LeaseTimeout != nil {
		return p.Spec.Detection.LeaseTimeout.Duration.String()
	}
	return "20s (default)"
}
