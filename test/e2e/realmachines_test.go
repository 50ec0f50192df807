package e2e

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/containerd"
	"palisade.dev/palisade/test/testbed/ipmisim"
	"palisade.dev/palisade/test/testbed/machine"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/witness"
)

// realScene is real machines (kubelet, containerd, runc in namespaces, power from ipmi_sim)
// on a LAN with a storage namespace holding the witness store, the real control plane with its
// audit log, and a StatefulSet whose one replica is the witness-client: the ground truth of who
// ran when.
type realScene struct {
	c        *testbed.Cluster
	lan      *netns.LAN
	machines []*machine.Machine
	bmcs     []*ipmisim.BMC
	store    *witness.Store
	storeURL string
}

const storePort = 7070

var witnessImage = containerd.Image{Name: "palisade.test/witness:1", Cmd: []string{"/bin/witness-client"}}

func startRealScene(t *testing.T, machines int) *realScene {
	t.Helper()
	img := witnessImage
	img.Files = map[string]string{"bin/witness-client": buildWitnessClient(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := testbed.Start(ctx, testbed.Options{AuditLog: true, NoCSIAttacher: true, NodeMonitorGracePeriod: 20 * time.Second,
		Controllers: append(append([]string{}, testbed.DefaultControllers...), machine.Controllers...), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	s := &realScene{c: c, lan: netns.New(t)}
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	relay := s.lan.Relay(t, u.Host)
	storage := s.serveStore(t)
	for i := 1; i <= machines; i++ {
		bmc, err := ipmisim.Start(ctx, ipmisim.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bmc.Stop() })
		m := machine.Start(t, machine.Options{Name: "node-" + strconv.Itoa(i), Index: i, LAN: s.lan, Cluster: c, APIServer: relay,
			Power: bmc, Images: []containerd.Image{img}, Labels: map[string]string{"palisade.dev/fenced-by": "ipmi"}})
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s kubelet log:\n%s", m.Name(), m.LogTail("kubelet", 30))
			}
		})
		if err := storage.Route("10.88."+strconv.Itoa(i)+".0/24", m.Net().IP()); err != nil {
			t.Fatal(err)
		}
		s.machines, s.bmcs = append(s.machines, m), append(s.bmcs, bmc)
	}
	for i, m := range s.machines {
		waitNodeReady(t, c, m.Name())
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.Name()}}
		patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationBMCAddress + `":"` + s.bmcs[i].Address() + `"}}}`)
		if err := c.Client.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// serveStore runs the witness store in the LAN's "storage" namespace.
func (s *realScene) serveStore(t *testing.T) *netns.Node {
	t.Helper()
	storage := s.lan.AddNode("storage")
	store, err := witness.NewStore(filepath.Join(t.TempDir(), "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(storage.IP(), strconv.Itoa(storePort))
	ln, err := storage.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: store.Handler(), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); _ = store.Close() })
	s.store, s.storeURL = store, "http://"+addr
	return storage
}

func buildWitnessClient(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "witness-client")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/witness-client")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building witness-client: %v\n%s", err, out)
	}
	return bin
}

func waitNodeReady(t *testing.T, c *testbed.Cluster, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		n := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for node %s Ready: %v", name, err)
	}
}

// startPalisade runs the controller in-process with the scene's BMC secret and policy.
func (s *realScene) startPalisade(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := s.c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scenario.SecretNamespace}}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: scenario.SecretName},
		StringData: map[string]string{"username": "admin", "password": "secret"}}
	if err := s.c.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Client.Create(ctx, scenario.NewPolicy(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(log)))
	mgr, err := app.NewManager(s.c.Config, app.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctrl.LoggerInto(cctx, ctrl.Log)) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("controller log (last 4 KiB):\n%s", tailBytes(b, 4096))
		}
		_ = log.Close()
	})
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// deployWitness runs the StatefulSet "db" with one replica, the witness-client, and returns
// the node its pod runs on once the store has its writes.
func (s *realScene) deployWitness(t *testing.T) (node, uid string) {
	t.Helper()
	env := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptrTo(int32(1)), ServiceName: "db", Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptrTo(int64(5)),
					Containers: []corev1.Container{{
						Name: "db", Image: witnessImage.Name, ImagePullPolicy: corev1.PullNever,
						Env: []corev1.EnvVar{env("POD_NAME", "metadata.name"), env("POD_UID", "metadata.uid"), env("NODE_NAME", "spec.nodeName"),
							{Name: "WITNESS_URL", Value: s.storeURL}, {Name: "BOOT_ID_FILE", Value: "/machine/boot_id"}},
						VolumeMounts: []corev1.VolumeMount{{Name: "boot-id", MountPath: "/machine/boot_id", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "boot-id", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
						Path: "/proc/sys/kernel/random/boot_id"}}}},
				},
			},
		},
	}
	if err := s.c.Client.Create(context.Background(), sts); err != nil {
		t.Fatal(err)
	}
	return s.waitWriter(t, "", time.Minute)
}

// waitWriter waits until db-0 runs on a node other than notOn and the store has accepted
// its writes, and returns that node and the pod's UID.
func (s *realScene) waitWriter(t *testing.T, notOn string, timeout time.Duration) (node, uid string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p := &corev1.Pod{}
		if err := s.c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "db-0"}, p); err != nil {
			return false, nil
		}
		if p.Spec.NodeName == "" || p.Spec.NodeName == notOn || p.DeletionTimestamp != nil {
			return false, nil
		}
		if err := s.store.Flush(); err != nil {
			return false, err
		}
		h, err := witness.ReadHistory(s.store.Path())
		if err != nil {
			return false, err
		}
		for _, r := range h {
			if r.Kind == witness.KindAppend && r.PodUID == string(p.UID) {
				node, uid = p.Spec.NodeName, string(p.UID)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for db-0 to write from a node other than %q: %v", notOn, err)
	}
	return node, uid
}

func (s *realScene) machine(name string) *machine.Machine {
	for _, m := range s.machines {
		if m.Name() == name {
			return m
		}
	}
	return nil
}

// check reads the run's records and judges them with the independent checker.
func (s *realScene) check(t *testing.T) []checker.Violation {
	t.Helper()
	if err := s.store.Flush(); err != nil {
		t.Fatal(err)
	}
	h, err := witness.ReadHistory(s.store.Path())
	if err != nil {
		t.Fatal(err)
	}
	evs, err := checker.ReadAudit(s.c.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	v := append(checker.OneCopy(h, 0), checker.NoEarlyRelease(evs, []string{"admin"})...)
	t.Logf("%d witness records, %d audit events; %s", len(h), len(evs), checker.Report(v))
	return v
}

// A machine cut off from the control plane keeps running its pod, which keeps writing to its
// storage. Palisade powers the machine off through its BMC before it releases the pod, so the
// witness store never sees two copies of db-0; vanilla Kubernetes with an operator who
// force-deletes the pod once the node turns NotReady (as people do) gets two copies writing at
// once — which also shows that the checker sees such a violation.
func TestRealMachinesCutOffFromTheControlPlane(t *testing.T) {
	for _, tc := range []struct {
		name     string
		palisade bool
	}{{"palisade", true}, {"vanilla with a force-deleting operator", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startRealScene(t, 3)
			if tc.palisade {
				s.startPalisade(t)
			}
			first, _ := s.deployWitness(t)
			m := s.machine(first)
			host, err := netns.ParseEndpoint(s.lan.HostIP())
			if err != nil {
				t.Fatal(err)
			}
			cut := time.Now()
			if err := m.Net().Cut(host); err != nil {
				t.Fatal(err)
			}
			if !tc.palisade {
				s.forceDeleteAtNotReady(t, first)
			}
			second, _ := s.waitWriter(t, first, 3*time.Minute)
			t.Logf("db-0 writes from %s %s after %s was cut off", second, time.Since(cut).Round(100*time.Millisecond), first)
			time.Sleep(3 * time.Second) // let both copies, if both run, write side by side
			if err := m.Net().Heal(); err != nil {
				t.Fatal(err)
			}
			v := s.check(t)
			switch {
			case tc.palisade && len(v) > 0:
				t.Errorf("Palisade: %d violations", len(v))
			case tc.palisade && m.Running():
				t.Errorf("Palisade released db-0 while %s still runs", first)
			case !tc.palisade && len(checker.OneCopy(s.historyOrFail(t), 0)) == 0:
				t.Errorf("vanilla with a force-deleting operator: the checker saw no two copies of db-0")
			}
		})
	}
}

// forceDeleteAtNotReady is the operator: once node turns NotReady, kubectl delete pod db-0
// --grace-period=0 --force.
func (s *realScene) forceDeleteAtNotReady(t *testing.T, node string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n := &corev1.Node{}
		if err := s.c.Client.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status != corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for node %s NotReady: %v", node, err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db-0"}}
	if err := s.c.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
}

func (s *realScene) historyOrFail(t *testing.T) []witness.Record {
	t.Helper()
	h, err := witness.ReadHistory(s.store.Path())
	if err != nil {
		t.Fatal(err)
	}
	return h
}
