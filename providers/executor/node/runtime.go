package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	cri "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"

	"palisade.dev/palisade/providers/executor"
	"palisade.dev/palisade/providers/executor/protocol"
)

// nodeRuntime is the node's container runtime at endpoint: the termination executor on
// containerd, and a CRI client of the agent's own for listing the pods and reading the
// kubelet's labels and annotations (the executor's Runtime lists one pod's containers only).
type nodeRuntime struct {
	endpoint string
	ctd      *executor.Containerd
	exec     *executor.Executor
	cri      internalapi.RuntimeService
}

// connectRuntime connects to containerd's socket at endpoint (a path, or unix://path).
func connectRuntime(ctx context.Context, endpoint string) (*nodeRuntime, error) {
	socket := strings.TrimPrefix(endpoint, "unix://")
	ctd, err := executor.NewContainerd(ctx, socket)
	if err != nil {
		return nil, err
	}
	rs, err := cri.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + socket).
		WithConnectionTimeout(10 * time.Second).WithTracerProvider(nil).Build(ctx)
	if err != nil {
		_ = ctd.Close()
		return nil, fmt.Errorf("connecting to the CRI at %s: %w", socket, err)
	}
	return &nodeRuntime{endpoint: endpoint, ctd: ctd, exec: executor.New(ctd), cri: rs}, nil
}

// checkKubeletRuntime fails unless the runtime holds a sandbox of the agent's own pod (UID
// podUID), whatever its state: the kubelet runs the agent's pod, so a runtime without it is not
// the kubelet's (a second containerd on the node, say), and there a terminate would find none of
// the node's pods, stop nothing and read back 0 running. Without podUID (an agent run as a host
// daemon) there is nothing to check by, and it returns nil. It costs one filtered list.
func checkKubeletRuntime(ctx context.Context, rt *nodeRuntime, podUID string) error {
	if podUID == "" {
		return nil
	}
	filter := &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodUID: podUID}}
	own, err := rt.cri.ListPodSandbox(ctx, filter)
	if err != nil {
		return fmt.Errorf("listing the sandboxes of the agent's own pod %s at %s: %w", podUID, rt.endpoint, err)
	}
	if len(own) == 0 {
		return fmt.Errorf("the runtime at %s holds no sandbox of this agent's own pod %s, so it is not the kubelet's runtime: "+
			"set --cri-endpoint (the chart's agent.criEndpoint) to the socket of the runtime the kubelet uses "+
			"(its --container-runtime-endpoint; /run/k3s/containerd/containerd.sock on k3s and RKE2)", rt.endpoint, podUID)
	}
	return nil
}

func (r *nodeRuntime) Close() error {
	return errors.Join(r.ctd.Close(), r.cri.Close(context.Background()))
}

// result is what a Terminate command did.
type result struct {
	pods, containers int
	// cuts are the pods whose grace period the order's time limit cut (graceCap).
	cuts []protocol.GraceCut
}

// terminateAll terminates every pod on the runtime but the agent's own (UID exclude), all at
// once, each by the kubelet's rules with its own grace period capped by limit and by ctx's
// deadline (graceCap), each from the spec the agent kept of it (kept, by UID) when it has one;
// then it reads every pod back (executor.Confirm) and finally sweeps the whole runtime. It
// returns a nil error only when every Confirm returned nil and the sweep found no container
// still running. It first checks that the runtime is the kubelet's (checkKubeletRuntime), and
// stops nothing when it is not.
func terminateAll(ctx context.Context, rt *nodeRuntime, limit *int64, exclude string, kept []protocol.Pod, log logr.Logger) (result, error) {
	if err := checkKubeletRuntime(ctx, rt, exclude); err != nil {
		return result{}, err
	}
	pods, err := listRuntimePods(ctx, rt.cri, exclude)
	if err != nil {
		return result{}, err
	}
	specs, bad := keptSpecs(kept)
	for _, err := range bad {
		log.Error(err, "not using a pod spec the agent kept: its pod is restored from the runtime's labels")
	}
	log.Info("terminating pods", "pods", len(pods), "specsKept", len(specs))
	counts := make([]int, len(pods))
	cuts := make([]*protocol.GraceCut, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() { counts[i], cuts[i], errs[i] = terminatePod(ctx, rt, p, limit, specs[p.uid], log) })
	}
	wg.Wait()
	res := result{pods: len(pods)}
	for i, p := range pods {
		res.containers += counts[i]
		if cuts[i] != nil {
			res.cuts = append(res.cuts, *cuts[i])
		}
		// Read back again, whatever Terminate said: Confirmed rests on this, not on reports.
		if err := rt.exec.Confirm(ctx, p.uid); err != nil {
			errs[i] = errors.Join(errs[i], fmt.Errorf("confirming pod %s/%s: %w", p.namespace, p.name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	return res, sweep(ctx, rt.cri, exclude)
}

// terminatePod terminates one pod, from the spec kept of it when there is one (spec not nil),
// and returns how many of its containers the executor stopped, and its grace period's cut when
// the order's time limit cut it.
func terminatePod(ctx context.Context, rt *nodeRuntime, p *runtimePod, limit *int64, spec *keptSpec, log logr.Logger) (int, *protocol.GraceCut, error) {
	pod := restorePod(p)
	source := "from the runtime's labels"
	if spec != nil {
		withSpec(pod, spec.pod)
		source = "kept at " + spec.keptAt.UTC().Format(time.RFC3339)
	}
	own, err := executor.GracePeriodSeconds(executor.Request{Pod: pod})
	if err != nil {
		return 0, nil, fmt.Errorf("pod %s/%s: %w", p.namespace, p.name, err)
	}
	if needsPodIP(pod) {
		pod.Status.PodIP = podIP(ctx, rt.cri, p)
	}
	limit, byTimeLimit := graceCap(ctx, rt.exec, limit) // from now: the grace period starts with Terminate
	capGrace(pod, own, limit)
	var cut *protocol.GraceCut
	if byTimeLimit && *limit < own {
		cut = &protocol.GraceCut{Pod: p.namespace + "/" + p.name, From: own, To: *limit}
	}
	rep, err := rt.exec.Terminate(ctx, executor.Request{Pod: pod})
	if rep != nil {
		log.Info("pod terminated", "pod", klog.KObj(pod), "podUID", p.uid, "spec", source, "ownGraceSeconds", own,
			"graceSeconds", rep.GracePeriodSeconds, "graceCutByTimeLimit", cut != nil,
			"confirmed", !rep.Confirmed.IsZero(), "report", rep.String())
	}
	if err != nil {
		return 0, cut, fmt.Errorf("terminating pod %s/%s: %w", p.namespace, p.name, err)
	}
	return len(rep.Containers), cut, nil
}

// graceCap is the cap on a pod's grace period: the command's, or the one that leaves SIGKILL
// and its read-back within the order's time limit (Executor.GraceWithin) when that is smaller,
// so that no container is left running when the order ends. cut says the time limit's applies.
func graceCap(ctx context.Context, ex *executor.Executor, limit *int64) (*int64, bool) {
	within, ok := ex.GraceWithin(ctx)
	if !ok || limit != nil && *limit <= within {
		return limit, false
	}
	return &within, true
}

// sweep lists every container of the runtime and fails, naming them, when any one but the
// agent's own pod's has not exited: a pod that appeared meanwhile, or one without the
// kubelet's labels, is still workload.
func sweep(ctx context.Context, rs internalapi.RuntimeService, exclude string) error {
	running, err := runningContainers(ctx, rs, exclude)
	if err != nil {
		return fmt.Errorf("confirming: %w", err)
	}
	if len(running) > 0 {
		sort.Strings(running)
		return fmt.Errorf("confirming: still running after termination: %s", strings.Join(running, "; "))
	}
	return nil
}

// runningContainers names the runtime's containers that have not exited, but for the agent's
// own pod's.
func runningContainers(ctx context.Context, rs internalapi.RuntimeService, exclude string) ([]string, error) {
	all, err := rs.ListContainers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	var running []string
	for _, c := range all {
		if c.Labels[labelPodUID] == exclude && exclude != "" {
			continue
		}
		if c.State != runtimeapi.ContainerState_CONTAINER_EXITED && c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			running = append(running, fmt.Sprintf("container %s (%s) of pod %s/%s is %s", c.Labels[labelContainerName],
				c.Id, c.Labels[labelPodNamespace], c.Labels[labelPodName], c.State))
		}
	}
	return running, nil
}
