package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers/aws"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed/ec2sim"
	"palisade.dev/palisade/test/testbed/simnode"
)

const awsInstance = "i-0a1b2c3d4e5f60718"

// nodeOwnVolume is an EBS volume of the node's own (its container images and the kubelet's
// state, as Bottlerocket's second volume), attached to its instance with no attachment in the
// API: forceDetachVolumes must leave it, or the recovery's power-on boots a broken node.
const nodeOwnVolume = "vol-0a11"

// instancePower is an EC2 instance as a simulated node's power supply: the node runs while
// its instance does (stopping included: its OS may still run).
type instancePower struct{ ep *ec2sim.Endpoint }

func (p instancePower) PoweredOn() (bool, error) { return p.ep.Running(awsInstance), nil }

// AWS fencing on the real control plane: node 1 runs on an EC2 instance of an endpoint that
// verifies every call's SigV4 signature (ec2sim, a stand-in: see its doc comment), named by the
// node's providerID; the policy's only method is AWS with keys from a Secret. Keys the endpoint
// refuses and an instance that hangs in "stopping" each fail the fence with a clear reason, no
// secret in it, and release nothing; then a forced stop read back as "stopped" releases the
// node.
func TestAWSFencing(t *testing.T) {
	ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{awsInstance}, Volumes: map[string]string{"vol-0db0": awsInstance, nodeOwnVolume: awsInstance}})
	env := startScene(t, scenario.Options{
		VolumeHandle: "vol-0db0",
		Node: func(i int, so *simnode.Options) {
			if i == 1 {
				so.Power = instancePower{ep}
				so.ProviderID = "aws:///us-east-1c/" + awsInstance
			}
		},
		Policy: func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods = []v1alpha1.Method{{Name: "ec2", Type: v1alpha1.MethodAWS, Timeout: &metav1.Duration{Duration: 6 * time.Second},
				AWS: &v1alpha1.AWSMethod{Endpoint: ep.URL(), CredentialsSecretRef: &v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "aws"},
					ForceDetachVolumes: true}}}
		},
	})
	ebsDetachWaitsForEC2(env, ep)
	ctx := context.Background()
	setKeys := func(secretKey string) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "aws"},
			StringData: map[string]string{aws.KeyAccessKeyID: ep.AccessKeyID(), aws.KeySecretAccessKey: secretKey}}
		if err := env.Cluster.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		if err := env.Cluster.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	const wrongKey = "wrong/secret+key/0000000000000000000000000"
	startController(t, env)
	w := deploy(t, env)
	n1 := env.Node(1)
	for _, tc := range []struct {
		name       string
		secretKey  string
		stuck      bool
		wantReason string
	}{
		{"keys refused", wrongKey, false, "CloudAuthFailed"},
		{"instance hangs in stopping", ep.SecretAccessKey(), true, "PowerStillOn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waitGone(t, env, n1.Name())
			setKeys(tc.secretKey)
			ep.SetStuckStopping(tc.stuck)
			patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: " + tc.name})
			nf := waitFence(t, env.Cluster, n1.Name(), time.Minute, phaseIs(v1alpha1.PhaseFailed))
			st, reason, msg := condition(nf, v1alpha1.ConditionFenced)
			if st != "False" || reason != tc.wantReason {
				t.Errorf("Fenced condition = %s/%s (%s), want False/%s", st, reason, msg, tc.wantReason)
			}
			if strings.Contains(msg, wrongKey) || strings.Contains(msg, ep.SecretAccessKey()) {
				t.Errorf("a secret key leaked into the condition: %s", msg)
			}
			if st, _, _ := condition(nf, v1alpha1.ConditionReleased); st != "False" {
				t.Errorf("Released condition = %q, want False", st)
			}
			assertNothingReleased(t, env, w)
			if got := ep.VolumeState("vol-0db0"); got != "in-use" {
				t.Errorf("the instance's volume is %s after a failed fence, want in-use", got)
			}
			t.Logf("failed as expected: %s: %s", reason, msg)
			patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: nil})
			if tc.stuck { // the owner starts the instance again
				ep.SetStuckStopping(false)
				ep.SetRunning(awsInstance)
			}
			if err := env.Cluster.Client.Delete(ctx, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}}); err != nil {
				t.Fatal(err)
			}
		})
	}
	assertNoSecret(t, env, wrongKey, ep.SecretAccessKey())
	t.Run("stopped and released", func(t *testing.T) {
		waitGone(t, env, n1.Name())
		setKeys(ep.SecretAccessKey())
		waitNodeReady(t, env, n1.Name())
		patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: aws"})
		nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, phaseIs(v1alpha1.PhaseReleased))
		if st, reason, msg := condition(nf, v1alpha1.ConditionFenced); st != "True" || reason != v1alpha1.ReasonPowerOffConfirmed {
			t.Errorf("Fenced condition = %s/%s (%s), want True/%s", st, reason, msg, v1alpha1.ReasonPowerOffConfirmed)
		}
		if got := ep.State(awsInstance); got != "stopped" {
			t.Errorf("instance state %s, want stopped", got)
		}
		forced := false
		for _, c := range ep.Calls() {
			forced = forced || (c.Action == "StopInstances" && c.Force)
		}
		if !forced {
			t.Errorf("calls %v: want a forced StopInstances", ep.Calls())
		}
		// forceDetachVolumes: the volume detached with Force after the pods, before the
		// attachments, and read back available.
		want := []string{"PowerOff:Succeeded", "ConfirmOff:Succeeded", "VerifyFenced:Succeeded", "Taint:Succeeded", "DeletePods:Succeeded",
			"DetachVolumes:Succeeded", "ReleaseAttachments:Succeeded"}
		if diff := cmp.Diff(want, trace(nf)); diff != "" {
			t.Errorf("step trace (-want +got):\n%s", diff)
		}
		detached := false
		for _, c := range ep.Calls() {
			detached = detached || (c.Action == "DetachVolume" && c.Force && c.Volume == "vol-0db0")
		}
		if got := ep.VolumeState("vol-0db0"); got != "available" || !detached {
			t.Errorf("volume vol-0db0 %s, forced DetachVolume %v: want available after a forced detach", got, detached)
		}
		if got := ep.VolumeState(nodeOwnVolume); got != "in-use" {
			t.Errorf("the node's own volume %s is %s after the release, want in-use (no attachment of the node names it)", nodeOwnVolume, got)
		}
		pod := &corev1.Pod{}
		if err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(w.Pod), pod); err == nil && pod.UID == w.Pod.UID {
			t.Errorf("the database pod %s still exists after the release", w.Pod.Name)
		}
	})
}

// ebsDetachWaitsForEC2 makes the test bed's CSI driver detach as the EBS CSI driver does: its
// ControllerUnpublishVolume does not succeed while EC2 (ep) lists the volume attached, as to an
// impaired instance, which is what forceDetachVolumes is for. Without it the stand-in driver
// detached at once, the attach-detach controller's detach (the out-of-service taint) could
// delete the node's VolumeAttachment before the release's DetachVolumes step, and the step
// then had no attachment, and so no volume, to detach (a CI run of f9ae020).
func ebsDetachWaitsForEC2(env *scenario.Env, ep *ec2sim.Endpoint) {
	env.Cluster.CSI.SetUnpublishCheck(func(volumeID, _ string) error {
		if state := ep.VolumeState(volumeID); state == "in-use" {
			return fmt.Errorf("EC2 lists volume %s %s", volumeID, state)
		}
		return nil
	})
}

// waitNodeReady waits until the node reports Ready.
func waitNodeReady(t *testing.T, env *scenario.Env, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		n := &corev1.Node{}
		if err := env.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("node %s not Ready in 1m", name)
}

// `kubectl delete node` of a cut-off node on an EC2 instance whose policy force-detaches its
// volumes: node deletion lets the Node go once the fence holds, and the volumes are detached
// after that. The detach is kept "detaching" until the Node is gone, so that the step must find
// the instance with no Node to read: it acts on the instance the fence recorded before its
// stop, and the fence is released.
func TestDeletingAnAWSNodeDetachesItsVolumes(t *testing.T) {
	ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{awsInstance}, Volumes: map[string]string{"vol-0db0": awsInstance, nodeOwnVolume: awsInstance}})
	ep.SetStuckDetaching(true)
	env := startScene(t, scenario.Options{
		LeaseTimeout: 10 * time.Minute, // the deletion, not the detectors, fences the node
		VolumeHandle: "vol-0db0",
		Node: func(i int, so *simnode.Options) {
			if i == 1 {
				so.Power = instancePower{ep}
				so.ProviderID = "aws:///us-east-1c/" + awsInstance
			}
		},
		Policy: func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods = []v1alpha1.Method{{Name: "ec2", Type: v1alpha1.MethodAWS,
				AWS: &v1alpha1.AWSMethod{Endpoint: ep.URL(), CredentialsSecretRef: &v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "aws"},
					ForceDetachVolumes: true}}}
		},
	})
	ebsDetachWaitsForEC2(env, ep)
	ctx := context.Background()
	if err := env.Cluster.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "aws"},
		StringData: map[string]string{aws.KeyAccessKeyID: ep.AccessKeyID(), aws.KeySecretAccessKey: ep.SecretAccessKey()}}); err != nil {
		t.Fatal(err)
	}
	startController(t, env)
	deploy(t, env)
	n1 := env.Node(1)
	waitNode(t, env, n1.Name(), "to carry the finalizer", func(n *corev1.Node) bool {
		return slices.Contains(n.Finalizers, v1alpha1.FinalizerFenceOnDelete)
	})
	n1.PauseHeartbeats() // cut off; the instance runs on
	if err := env.Cluster.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: n1.Name()}, &corev1.Node{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("the Node was not deleted after its fence: %v", err)
	}
	if got := ep.State(awsInstance); got != "stopped" {
		t.Errorf("instance state %s once the Node is gone, want stopped", got)
	}
	ep.SetStuckDetaching(false)
	nf := waitFence(t, env.Cluster, n1.Name(), time.Minute, phaseIs(v1alpha1.PhaseReleased))
	if nf.Spec.Trigger != v1alpha1.TriggerNodeDeleted {
		t.Errorf("trigger %s, want %s", nf.Spec.Trigger, v1alpha1.TriggerNodeDeleted)
	}
	detached := false
	for _, c := range ep.Calls() {
		detached = detached || (c.Action == "DetachVolume" && c.Force && c.Volume == "vol-0db0")
	}
	if got := ep.VolumeState("vol-0db0"); got != "available" || !detached {
		t.Errorf("volume vol-0db0 %s, forced DetachVolume %v: want available after a forced detach", got, detached)
	}
	if got := ep.VolumeState(nodeOwnVolume); got != "in-use" {
		t.Errorf("the node's own volume %s is %s after the release, want in-use (no attachment of the node names it)", nodeOwnVolume, got)
	}
	if !slices.Contains(trace(nf), "DetachVolumes:Succeeded") {
		t.Errorf("step trace %v: want DetachVolumes:Succeeded", trace(nf))
	}
}
