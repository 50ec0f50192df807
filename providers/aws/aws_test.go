package aws_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/aws"
	"palisade.dev/palisade/providers/power"
	"palisade.dev/palisade/test/testbed/ec2sim"
)

// The tests run the provider through aws-sdk-go-v2's EC2 client against ec2sim, an EC2 Query
// endpoint that verifies every call's SigV4 signature (see its doc comment for why it is a
// stand-in).

const (
	ns       = "palisade-system"
	instance = "i-0123456789abcdef0"
)

type scene struct {
	ep     *ec2sim.Endpoint
	p      *aws.Provider
	method v1alpha1.Method
}

// newScene is node-1 on instance in zone us-east-1a, the method's keys in a Secret (secret
// overrides the secret key when set) and endpoint ep.
func newScene(t *testing.T, ep *ec2sim.Endpoint, providerID, secret string, edit func(*v1alpha1.AWSMethod), opts ...power.Option) *scene {
	t.Helper()
	if secret == "" {
		secret = ep.SecretAccessKey()
	}
	reader := fake.NewClientBuilder().WithObjects(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: corev1.NodeSpec{ProviderID: providerID}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "aws"}, Data: map[string][]byte{
			aws.KeyAccessKeyID: []byte(ep.AccessKeyID()), aws.KeySecretAccessKey: []byte(secret)}},
	).Build()
	m := &v1alpha1.AWSMethod{Endpoint: ep.URL(), CredentialsSecretRef: &v1alpha1.SecretReference{Namespace: ns, Name: "aws"}}
	if edit != nil {
		edit(m)
	}
	return &scene{ep: ep, p: aws.New(reader, opts...), method: v1alpha1.Method{Name: "aws", Type: v1alpha1.MethodAWS, AWS: m}}
}

func (s *scene) req(attempt int32, expired bool) providers.Request {
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: types.UID("fence-1")}, Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1"}}
	return providers.Request{Fence: nf, Method: s.method, Attempt: attempt, Now: time.Now(), Expired: expired}
}

func (s *scene) check(t *testing.T, attempt int32, expired bool) (providers.Status, error) {
	t.Helper()
	return s.p.Check(context.Background(), s.req(attempt, expired))
}

func start(t *testing.T) *ec2sim.Endpoint {
	return ec2sim.Start(t, ec2sim.Options{Instances: []string{instance, "i-00000000000000001"}})
}

const providerID = "aws:///us-east-1a/" + instance

func TestForcedStopConfirmedByDescribeInstances(t *testing.T) {
	ep := start(t)
	ep.SetStopDelay(700 * time.Millisecond)
	s := newScene(t, ep, providerID, "", nil)
	st, err := s.p.Fence(context.Background(), s.req(1, false))
	if err != nil || st.State != providers.InProgress {
		t.Fatalf("Fence = %+v, %v", st, err)
	}
	st, err = s.check(t, 1, false)
	if err != nil || st.State != providers.InProgress || !strings.Contains(st.Message, "stopping") {
		t.Fatalf("Check while stopping = %+v, %v; want InProgress naming the state", st, err)
	}
	time.Sleep(time.Second)
	st, err = s.check(t, 2, false)
	if err != nil || st.State != providers.Confirmed {
		t.Fatalf("Check once stopped = %+v, %v; want Confirmed", st, err)
	}
	calls := ep.Calls()
	if len(calls) == 0 || calls[0].Action != "StopInstances" || !calls[0].Force || len(calls[0].Instances) != 1 || calls[0].Instances[0] != instance {
		t.Errorf("first call = %+v, want StopInstances of %s with Force", calls, instance)
	}
	if ep.State("i-00000000000000001") != "running" {
		t.Error("another instance was stopped")
	}
}

func TestStuckStoppingNeverConfirms(t *testing.T) {
	ep := start(t)
	ep.SetStuckStopping(true)
	s := newScene(t, ep, providerID, "", nil)
	if _, err := s.p.Fence(context.Background(), s.req(1, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.check(t, power.ResendOffEvery, false); err != nil {
		t.Fatal(err)
	}
	st, err := s.check(t, 9, true)
	if err != nil || st.State != providers.Failed || st.Reason != providers.ReasonPowerStillOn || !strings.Contains(st.Message, "stopping") {
		t.Fatalf("Check once expired = %+v, %v; want Failed PowerStillOn naming the state", st, err)
	}
	stops := 0
	for _, c := range ep.Calls() {
		if c.Action == "StopInstances" {
			stops++
		}
	}
	if stops != 2 {
		t.Errorf("%d StopInstances, want 2 (sent again at attempt %d)", stops, power.ResendOffEvery)
	}
}

// A hibernated instance reads "stopped", but its memory is kept and it resumes the node's
// processes when started: the fence is never confirmed, and fails once the method's time is
// up, naming the hibernation. Stopped by the fence itself (or by anyone without hibernation),
// the same instance is Off.
func TestHibernatedIsNotOff(t *testing.T) {
	ep := start(t)
	ep.Hibernate(instance)
	s := newScene(t, ep, providerID, "", nil)
	if _, err := s.p.Fence(context.Background(), s.req(1, false)); err != nil {
		t.Fatal(err)
	}
	for attempt := int32(1); attempt <= power.ResendOffEvery; attempt++ {
		st, err := s.check(t, attempt, false)
		if err != nil || st.State != providers.InProgress || !strings.Contains(st.Message, "hibernated") {
			t.Fatalf("Check %d of a hibernated instance = %+v, %v; want InProgress naming the hibernation", attempt, st, err)
		}
	}
	st, err := s.check(t, power.ResendOffEvery+1, true)
	if err != nil || st.State != providers.Failed || st.Reason != providers.ReasonPowerStillOn || !strings.Contains(st.Message, "resumes the node's processes") {
		t.Fatalf("Check once expired = %+v, %v; want Failed PowerStillOn saying it resumes", st, err)
	}
	if got := ep.State(instance); got != "stopped" {
		t.Fatalf("instance %s, want still stopped (hibernated)", got)
	}

	// Resumed and stopped by its owner without hibernation: Off.
	ep.SetRunning(instance)
	if _, err := s.p.Fence(context.Background(), s.req(1, false)); err != nil {
		t.Fatal(err)
	}
	if st, err := s.check(t, 1, false); err != nil || st.State != providers.Confirmed {
		t.Fatalf("Check of the instance stopped by the fence = %+v, %v; want Confirmed", st, err)
	}
}

func TestTerminatedIsGone(t *testing.T) {
	ep := start(t)
	ep.Terminate(instance)
	s := newScene(t, ep, providerID, "", nil)
	st, err := s.check(t, 1, false)
	if err != nil || st.State != providers.Gone {
		t.Fatalf("Check = %+v, %v; want Gone", st, err)
	}
}

func TestUnknownInstanceIsBadTargetNeverGone(t *testing.T) {
	ep := start(t)
	s := newScene(t, ep, "aws:///us-east-1a/i-0fffffffffffffff0", "", nil)
	st, err := s.check(t, 1, false)
	if providers.ReasonOf(err) != providers.ReasonBadTarget || st.State == providers.Gone {
		t.Fatalf("Check = %+v, %v; want a BadTarget error, never Gone", st, err)
	}
	if !strings.Contains(err.Error(), "does not know the instance") {
		t.Errorf("error %q should say what to check", err)
	}
}

func TestWrongKeysRefused(t *testing.T) {
	ep := start(t)
	const wrong = "wrong/secret+key/000000000000000000000000"
	s := newScene(t, ep, providerID, wrong, nil)
	_, err := s.p.Fence(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonCloudAuthFailed || providers.IsRetryable(err) {
		t.Fatalf("Fence error = %v (reason %s), want %s, not retryable", err, providers.ReasonOf(err), providers.ReasonCloudAuthFailed)
	}
	if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), ep.SecretAccessKey()) {
		t.Errorf("the error shows a secret key: %v", err)
	}
	if providers.HintOf(err) == "" {
		t.Error("no hint for people")
	}
	if ep.Refused() == 0 || len(ep.Calls()) != 0 || ep.State(instance) != "running" {
		t.Errorf("refused %d, calls %v, state %s: want the signature refused and nothing done", ep.Refused(), ep.Calls(), ep.State(instance))
	}
}

func TestRegion(t *testing.T) {
	ep := ec2sim.Start(t, ec2sim.Options{Region: "eu-west-3", Instances: []string{instance}})
	t.Run("from the zone, wrong for this endpoint", func(t *testing.T) {
		s := newScene(t, ep, providerID, "", nil) // zone us-east-1a
		_, err := s.p.Fence(context.Background(), s.req(1, false))
		if providers.ReasonOf(err) != providers.ReasonCloudAuthFailed || ep.State(instance) != "running" {
			t.Fatalf("Fence error = %v, state %s: want the scope refused and nothing done", err, ep.State(instance))
		}
	})
	t.Run("the method's region", func(t *testing.T) {
		s := newScene(t, ep, providerID, "", func(m *v1alpha1.AWSMethod) { m.Region = "eu-west-3" })
		if _, err := s.p.Fence(context.Background(), s.req(1, false)); err != nil {
			t.Fatal(err)
		}
		if st, err := s.check(t, 1, false); err != nil || st.State != providers.Confirmed {
			t.Fatalf("Check = %+v, %v; want Confirmed", st, err)
		}
	})
}

func TestSlowEndpointIsUnreachable(t *testing.T) {
	ep := start(t)
	ep.SetDelay(3 * time.Second)
	s := newScene(t, ep, providerID, "", nil, power.WithTimeout(time.Second))
	startAt := time.Now()
	_, err := s.check(t, 1, false)
	if providers.ReasonOf(err) != providers.ReasonCloudUnreachable || !providers.IsRetryable(err) || !strings.Contains(err.Error(), "may or may not") {
		t.Fatalf("Check error = %v, want a retryable %s", err, providers.ReasonCloudUnreachable)
	}
	if took := time.Since(startAt); took > 2500*time.Millisecond {
		t.Errorf("the call took %v, want it bounded by the 1 s timeout", took)
	}
}

func TestBadTargets(t *testing.T) {
	ep := start(t)
	for name, id := range map[string]string{
		"no providerID":        "",
		"another cloud":        "gce://project/zone/vm",
		"malformed instance":   "aws:///us-east-1a/vm-1",
		"zone without region":  "aws:///somewhere/" + instance,
		"extra path component": "aws:///us-east-1a/x/" + instance,
	} {
		t.Run(name, func(t *testing.T) {
			s := newScene(t, ep, id, "", nil)
			_, err := s.p.Fence(context.Background(), s.req(1, false))
			if providers.ReasonOf(err) != providers.ReasonBadTarget || providers.IsRetryable(err) {
				t.Fatalf("Fence error = %v, want %s", err, providers.ReasonBadTarget)
			}
		})
	}
	if len(ep.Calls()) != 0 {
		t.Errorf("calls %v reached EC2", ep.Calls())
	}
}

func TestParseProviderIDAndRegion(t *testing.T) {
	for id, want := range map[string][2]string{
		"aws:///us-east-1a/i-0123456789abcdef0":       {"us-east-1a", "us-east-1"},
		"aws://us-east-1a/i-0123456789abcdef0":        {"us-east-1a", "us-east-1"},
		"aws:///us-west-2-lax-1a/i-0123456789abcdef0": {"us-west-2-lax-1a", "us-west-2"},
		"aws:///us-gov-west-1b/i-01234567":            {"us-gov-west-1b", "us-gov-west-1"},
		"aws:///cn-northwest-1a/i-0123456789abcdef0":  {"cn-northwest-1a", "cn-northwest-1"},
		"aws:///ap-southeast-4c/i-0fedcba9876543210":  {"ap-southeast-4c", "ap-southeast-4"},
	} {
		zone, _, err := aws.ParseProviderID(id)
		if err != nil || zone != want[0] || aws.RegionOfZone(zone) != want[1] {
			t.Errorf("%s: zone %q region %q (%v), want %v", id, zone, aws.RegionOfZone(zone), err, want)
		}
	}
}

// Calls share one pool of connections: 30 reads leave no connection (and its two goroutines)
// behind each, as a transport per call did.
func TestCallsShareConnections(t *testing.T) {
	ep := start(t)
	s := newScene(t, ep, providerID, "", nil)
	if _, err := s.check(t, 1, false); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for i := range 30 {
		if _, err := s.check(t, int32(i+2), false); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if grew := runtime.NumGoroutine() - before; grew > 10 {
		t.Errorf("30 calls left %d more goroutines", grew)
	}
}
