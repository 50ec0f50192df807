package simnode

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// startPodInformer watches the pods bound to the node and waits for the first list.
func (n *Node) startPodInformer(ctx context.Context) error {
	selector := fields.OneTermEqualSelector("spec.nodeName", n.opts.Name).String()
	n.factory = informers.NewSharedInformerFactoryWithOptions(n.kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	n.pods = n.factory.Core().V1().Pods().Informer()
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			n.queue.Add(key)
		}
	}
	if _, err := n.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return fmt.Errorf("watching pods of node %s: %w", n.opts.Name, err)
	}
	n.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), n.pods.HasSynced) {
		return fmt.Errorf("watching pods of node %s: %w", n.opts.Name, context.Cause(ctx))
	}
	return nil
}

func (n *Node) requeueAllPods() {
	if n.pods == nil {
		return
	}
	for _, key := range n.pods.GetStore().ListKeys() {
		n.queue.Add(key)
	}
}

// podWorker syncs queued pods while the node is active. Pods queued while it is not are
// dropped: waking up requeues them all.
func (n *Node) podWorker(ctx context.Context) {
	for {
		key, quit := n.queue.Get()
		if quit {
			return
		}
		if !n.active() {
			n.queue.Forget(key)
		} else if err := n.syncPod(ctx, key); err != nil && ctx.Err() == nil {
			n.logf("syncing pod %s: %v", key, err)
			n.queue.AddRateLimited(key)
		} else {
			n.queue.Forget(key)
		}
		n.queue.Done(key)
	}
}

// syncPod confirms the termination of a pod being deleted and reports the others running once
// their volumes are attached.
func (n *Node) syncPod(ctx context.Context, key string) error {
	obj, exists, err := n.pods.GetStore().GetByKey(key)
	if err != nil || !exists {
		n.setWaiting(key, "")
		return err
	}
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		n.setWaiting(key, "")
		return n.confirmTermination(ctx, key, pod)
	}
	n.mu.Lock()
	bootTime := metav1.NewTime(n.bootTime.Truncate(time.Second))
	n.mu.Unlock()
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || podRunning(pod, bootTime) {
		return nil
	}
	ready, waitFor, err := n.volumesReady(ctx, pod)
	if err != nil || !ready {
		n.setWaiting(key, waitFor)
		n.queue.AddAfter(key, attachRecheck)
		return err
	}
	n.setWaiting(key, "")
	pod = pod.DeepCopy()
	n.setPodRunning(pod, bootTime, metav1.Now())
	if _, err := n.kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return nil // synced from a stale cache: the newer pod is on its way and requeues it
		}
		return err
	}
	n.logf("pod %s running", key)
	return nil
}

// confirmTermination deletes a terminating pod for good, as the kubelet does once its
// containers are gone.
func (n *Node) confirmTermination(ctx context.Context, key string, pod *corev1.Pod) error {
	err := n.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err == nil {
		n.logf("pod %s terminated", key)
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or replaced by a pod of the same name
	}
	return err
}

// setWaiting records what the pod waits for ("" for nothing) and logs it when it changes.
func (n *Node) setWaiting(key, waitFor string) {
	n.mu.Lock()
	was := n.waiting[key]
	if waitFor == "" {
		delete(n.waiting, key)
	} else {
		n.waiting[key] = waitFor
	}
	n.mu.Unlock()
	if waitFor != "" && waitFor != was {
		n.logf("pod %s waiting for %s", key, waitFor)
	}
}

// podRunning reports whether pod is Running and Ready with every container started in the
// current boot.
func podRunning(pod *corev1.Pod, bootTime metav1.Time) bool {
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) != len(pod.Spec.Containers) {
		return false
	}
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Running == nil || c.State.Running.StartedAt.Before(&bootTime) || !c.Ready {
			return false
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setPodRunning writes the status of a pod whose containers run, restarting (restartCount+1)
// those that ran in an earlier boot.
func (n *Node) setPodRunning(pod *corev1.Pod, bootTime, now metav1.Time) {
	st := &pod.Status
	st.Phase = corev1.PodRunning
	st.HostIP, st.HostIPs = n.ip, []corev1.HostIP{{IP: n.ip}}
	if st.PodIP == "" {
		st.PodIP = n.nextPodIP()
		if pod.Spec.HostNetwork {
			st.PodIP = n.ip
		}
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	for _, t := range []corev1.PodConditionType{
		corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled,
	} {
		setPodCondition(st, t, now)
	}
	st.InitContainerStatuses = initContainerStatuses(pod.Spec.InitContainers, now)
	st.ContainerStatuses = containerStatuses(pod, bootTime, now)
}

func (n *Node) nextPodIP() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.podSeq++
	return fmt.Sprintf("10.%d.%d.%d", 128+(n.seq/256)%128, n.seq%256, (n.podSeq-1)%254+1)
}

// setPodCondition sets condition t to True; LastTransitionTime changes only with Status.
func setPodCondition(st *corev1.PodStatus, t corev1.PodConditionType, now metav1.Time) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			if st.Conditions[i].Status != corev1.ConditionTrue {
				st.Conditions[i] = corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
}

func initContainerStatuses(containers []corev1.Container, now metav1.Time) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, c := range containers {
		out = append(out, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "simnode://" + c.Image, Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now,
			}},
		})
	}
	return out
}

func containerStatuses(pod *corev1.Pod, bootTime, now metav1.Time) []corev1.ContainerStatus {
	previous := map[string]corev1.ContainerStatus{}
	for _, s := range pod.Status.ContainerStatuses {
		previous[s.Name] = s
	}
	out := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		s := corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "simnode://" + c.Image,
			ContainerID: fmt.Sprintf("simnode://%s-%s", pod.UID, c.Name),
			Ready:       true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}
		if p, ok := previous[c.Name]; ok {
			s.RestartCount = p.RestartCount
			if p.State.Running != nil && !p.State.Running.StartedAt.Before(&bootTime) {
				s.State = p.State // still running since this boot
			} else if p.State.Running != nil {
				s.RestartCount++ // the node rebooted under it
			}
		}
		out = append(out, s)
	}
	return out
}
