package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers/redfish"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/redfishsim"
	"palisade.dev/palisade/test/testbed/simnode"
)

// fencedBy is how one failover scene fences node 1: its scene options, and how its machine
// loses its power and reads it back.
type fencedBy struct {
	opts      scenario.Options
	cut       func(env *scenario.Env) error
	poweredOn func(env *scenario.Env) func() (bool, error)
	setup     func(env *scenario.Env) error
}

// failoverMethods are the kinds of fence BenchmarkFailoverByMethod compares.
func failoverMethods(b *testing.B) map[string]func() fencedBy {
	ipmiPower := func(env *scenario.Env) func() (bool, error) { return env.Node(1).BMC.PoweredOn }
	ipmiCut := func(env *scenario.Env) error { return env.Node(1).BMC.SetPower(false) }
	none := func(*scenario.Env) error { return nil }
	return map[string]func() fencedBy{
		// The scene's default policy: IPMI through ipmi_sim.
		"ipmi": func() fencedBy { return fencedBy{cut: ipmiCut, poweredOn: ipmiPower, setup: none} },
		// Node 1 is powered by a Redfish service over TLS (redfishsim); the only method is Redfish.
		"redfish": func() fencedBy {
			svc := redfishsim.Start(b, redfishsim.Options{})
			return fencedBy{
				opts: scenario.Options{
					Node: func(i int, so *simnode.Options) {
						if i == 1 {
							so.Power = redfishMachine{svc}
							so.Annotations[v1alpha1.AnnotationBMCAddress] = svc.Address()
						}
					},
					Policy: func(p *v1alpha1.FencingPolicy) {
						p.Spec.Methods = []v1alpha1.Method{{Name: "redfish", Type: v1alpha1.MethodRedfish, Redfish: &v1alpha1.RedfishMethod{
							CredentialsSecretRef: v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "redfish"},
							CABundleSecretRef:    &v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "redfish-ca"}}}}
					},
				},
				// The machine's power: its Redfish system, and the scene's BMC that its agent
				// runs by (the agent dies with the machine).
				cut:       func(env *scenario.Env) error { svc.SetPower(0, false); return env.Node(1).BMC.SetPower(false) },
				poweredOn: func(*scenario.Env) func() (bool, error) { return redfishMachine{svc}.PoweredOn },
				setup: func(env *scenario.Env) error {
					for _, s := range []*corev1.Secret{
						{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "redfish"},
							StringData: map[string]string{"username": svc.Username(), "password": svc.Password()}},
						{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "redfish-ca"},
							StringData: map[string]string{redfish.CABundleKey: string(svc.CACert())}},
					} {
						if err := env.Cluster.Client.Create(context.Background(), s); err != nil {
							return err
						}
					}
					return nil
				},
			}
		},
		// The machine dies; the only method is a storage fence through the real csi-addons
		// manager and sidecar, whose confirmation comes from the storage, not the power.
		"networkfence": func() fencedBy {
			return fencedBy{
				opts: scenario.Options{CSIAddons: true, Policy: func(p *v1alpha1.FencingPolicy) {
					p.Spec.Methods = []v1alpha1.Method{{Name: "storage", Type: v1alpha1.MethodNetworkFence,
						NetworkFence: &v1alpha1.NetworkFenceMethod{NetworkFenceClassName: testbed.NetworkFenceClassName}}}
				}},
				cut: ipmiCut, poweredOn: ipmiPower, setup: none,
			}
		},
	}
}

// redfishMachine is a redfishsim system as a simulated node's power supply.
type redfishMachine struct{ svc *redfishsim.Service }

func (p redfishMachine) PoweredOn() (bool, error) { return p.svc.PoweredOn(0), nil }

// BenchmarkFailoverByMethod runs BenchmarkFailover's scene with Palisade (agents on every node,
// the kubelet's 10 s renewals, the default Lease timeout), its node 1 fenced through each kind
// of method in turn: IPMI (ipmi_sim), Redfish (redfishsim over TLS) and a storage fence
// (NetworkFence through the real csi-addons manager). It reports the medians from the power
// loss to the replacement Running, one line per method.
func BenchmarkFailoverByMethod(b *testing.B) {
	runs := 3
	if v, err := strconv.Atoi(os.Getenv("PALISADE_BENCH_RUNS")); err == nil && v > 0 {
		runs = v
	}
	methods := failoverMethods(b)
	names := []string{"ipmi", "redfish", "networkfence"}
	if v := os.Getenv("PALISADE_BENCH_METHODS"); v != "" { // e.g. "redfish,networkfence"
		names = strings.Split(v, ",")
	}
	for range b.N {
		for _, name := range names {
			if methods[name] == nil {
				b.Fatalf("PALISADE_BENCH_METHODS: no method %q (want some of ipmi, redfish, networkfence)", name)
			}
			var rs []result
			for i := 1; i <= runs; i++ {
				r := failoverFencedBy(b, methods[name](), true)
				fmt.Printf("BENCH failover_method_run name=%s run=%d replacement_running_s=%.1f attachment_released_s=%.1f confirmed_before_release=%t\n",
					name, i, r.replacementRunning.Seconds(), r.attachmentReleased.Seconds(), r.confirmedBeforeRelease)
				rs = append(rs, r)
			}
			confirmed := 0
			for _, r := range rs {
				if r.confirmedBeforeRelease {
					confirmed++
				}
			}
			fmt.Printf("BENCH failover_method name=%s palisade_s=%.1f confirmed_before_release=%d/%d runs=%d\n", name, median(rs), confirmed, len(rs), runs)
		}
	}
}

// failoverFencedBy is one failover scene, node 1 fenced as f says: with Palisade (its
// controller and a node agent on every node, 1 s heartbeats), or with no policy and the ideal
// operator instead.
func failoverFencedBy(b *testing.B, f fencedBy, withPalisade bool) result {
	ctx := context.Background()
	o := f.opts
	o.LeaseRenewInterval, o.Agents, o.NoPolicy = kubeletRenew, withPalisade, !withPalisade
	env, err := scenario.Start(ctx, o)
	if err != nil {
		b.Fatalf("starting scene: %v", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			b.Errorf("stopping scene: %v", err)
		}
	}()
	if err := f.setup(env); err != nil {
		b.Fatal(err)
	}
	if withPalisade {
		if err := env.StartController(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
	w, err := env.DeployDatabase(ctx, env.Node(1))
	if err != nil {
		b.Fatal(err)
	}
	// Let a full renewal interval pass so the power cut lands at a random point of it, as in life.
	time.Sleep(kubeletRenew + time.Duration(time.Now().UnixNano()%int64(kubeletRenew)))
	opCtx, stopOperator := context.WithCancel(ctx)
	defer stopOperator()
	tr, err := scenario.Track(ctx, scenario.Target{Cluster: env.Cluster, Node: env.Node(1).Name(), PoweredOn: f.poweredOn(env)}, w.Pod, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Stop()
	if err := f.cut(env); err != nil {
		b.Fatal(err)
	}
	if !withPalisade {
		go idealOperator(opCtx, env.Cluster.Client, env.Node(1).Name())
	}
	var r result
	if r.replacementRunning, err = tr.Wait(ctx, scenario.ReplacementRunning, 5*time.Minute); err != nil {
		b.Fatal(err)
	}
	r.podDeleted, _ = tr.At(scenario.PodDeleted)
	if r.attachmentReleased, err = tr.Wait(ctx, scenario.AttachmentReleased, 5*time.Minute); err != nil {
		b.Fatal(err)
	}
	r.confirmedBeforeRelease, _ = tr.ConfirmedBeforeRelease()
	return r
}
