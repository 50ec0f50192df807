package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

var jsonMarshal = json.Marshal

// A malformed fence request is reported on the Node and does nothing; a valid one fences the
// node like a detected failure, recorded as Manual with who asked.
func TestManualFenceRequest(t *testing.T) {
	env := startScene(t, scenario.Options{})
	startController(t, env)
	n2 := env.Node(2)
	ctx := context.Background()

	for _, bad := range []string{"", "   ", strings.Repeat("x", 300), "line\x07bell"} {
		patchAnnotations(t, env, n2.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: bad})
		time.Sleep(time.Second)
	}
	time.Sleep(2 * time.Second)
	events := eventsFor(t, env, "Node", n2.Name())
	count := 0
	for _, e := range events {
		if strings.HasPrefix(e, "InvalidFenceRequest:") {
			count++
		}
	}
	if count == 0 {
		t.Errorf("no InvalidFenceRequest event on the node; events: %v", events)
	}
	err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: n2.Name()}, &v1alpha1.NodeFence{})
	if err == nil || client.IgnoreNotFound(err) != nil {
		t.Fatalf("a malformed request created a NodeFence (err %v)", err)
	}
	if offs, err := n2.BMC.OffCommands(); err != nil || offs != 0 {
		t.Fatalf("a malformed request reached the BMC: %d off commands (err %v)", offs, err)
	}

	patchAnnotations(t, env, n2.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "disk controller reports errors"})
	nf := waitFence(t, env.Cluster, n2.Name(), time.Minute, phaseIs(v1alpha1.PhaseReleased))
	// No admission policy records the requester in this scene, and the field manager
	// ("e2e-operator") is not taken for it: requestedBy stays empty (TestFenceRequestAdmission
	// checks the recorded user).
	if nf.Spec.Trigger != v1alpha1.TriggerManual || nf.Spec.Reason != "disk controller reports errors" || nf.Spec.RequestedBy != "" {
		t.Errorf("spec = trigger %s reason %q requestedBy %q; want Manual, the annotation's text, none", nf.Spec.Trigger, nf.Spec.Reason, nf.Spec.RequestedBy)
	}
	if on, err := n2.BMC.PoweredOn(); err != nil || on {
		t.Errorf("node 2 power on = %t (err %v) after a confirmed manual fence", on, err)
	}
}

// A request on a node no policy selects is reported, fences nothing and is removed: left on the
// Node, it would power the node off once a policy came to cover it.
func TestManualFenceRequestWithoutPolicy(t *testing.T) {
	env := startScene(t, scenario.Options{NoPolicy: true})
	startController(t, env)
	n1 := env.Node(1)
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "maintenance"})
	time.Sleep(3 * time.Second)
	if !hasEvent(eventsFor(t, env, "Node", n1.Name()), "NoFencingPolicy") {
		t.Error("no NoFencingPolicy event on the node")
	}
	if offs, err := n1.BMC.OffCommands(); err != nil || offs != 0 {
		t.Errorf("%d off commands reached the BMC (err %v), want 0", offs, err)
	}
	node := &corev1.Node{}
	if err := env.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: n1.Name()}, node); err != nil {
		t.Fatal(err)
	}
	if v, ok := node.Annotations[v1alpha1.AnnotationFenceRequest]; ok {
		t.Errorf("the request %q is still on the node, want it removed", v)
	}
}
