package bench

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vmware/govmomi/simulator"
	vimtypes "github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/agent/gateway"
	"palisade.dev/palisade/providers/aws"
	"palisade.dev/palisade/providers/ipmi"
	"palisade.dev/palisade/providers/networkfence"
	"palisade.dev/palisade/providers/power"
	"palisade.dev/palisade/providers/redfish"
	"palisade.dev/palisade/providers/storagegateway"
	"palisade.dev/palisade/providers/vsphere"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/ec2sim"
	"palisade.dev/palisade/test/testbed/ipmisim"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/testbed/redfishsim"
	"palisade.dev/palisade/test/testbed/storagehost"
)

// providerRuns is how many fences each provider takes; the lines report medians.
const providerRuns = 5

// BenchmarkProviders fences one machine per run through each provider against its test peer —
// ipmi_sim through ipmitool, redfishsim over TLS with a session, ec2sim with SigV4, vcsim, the
// storage gateway (its real nftables in a storage host's namespace, over mutual TLS) and the
// real csi-addons manager and sidecar in front of the stand-in storage driver — and reports
// the time its Fence took (the command accepted) and the time from then to the first Check that
// confirmed the fence (reads until the fence reads in place, 100 ms apart).
func BenchmarkProviders(b *testing.B) {
	const ns = "palisade-system"
	secret := func(name string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	type peer struct {
		name string
		peer func(b *testing.B) (v1alpha1.Method, func(), []client.Object)
	}
	// The storage fence runs against the real API server and the real csi-addons manager and
	// sidecar (the test bed's stand-in driver behind them): its peer is a cluster.
	var storage *testbed.Cluster
	peers := []peer{
		{"ipmi", func(b *testing.B) (v1alpha1.Method, func(), []client.Object) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// The node's SMBIOS UUID, which its BMC sends least significant byte first: every
			// command is preceded by the identity check's Get System GUID.
			bmc, err := ipmisim.Start(ctx, ipmisim.Options{Dir: b.TempDir(), GUID: "3344564fc0b431801036470044454c4c"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = bmc.Stop() })
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{v1alpha1.AnnotationBMCAddress: bmc.Address()}},
				Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{SystemUUID: "4c4c4544-0047-3610-8031-b4c04f564433"}}}
			m := v1alpha1.Method{Name: "ipmi", Type: v1alpha1.MethodIPMI, IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: ns, Name: "bmc"}}}
			on := func() { _ = bmc.SetPower(true) }
			return m, on, []client.Object{node, secret("bmc", map[string]string{"username": bmc.Username(), "password": bmc.Password()})}
		}},
		{"redfish", func(b *testing.B) (v1alpha1.Method, func(), []client.Object) {
			svc := redfishsim.Start(b, redfishsim.Options{})
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{v1alpha1.AnnotationBMCAddress: svc.Address()}}}
			m := v1alpha1.Method{Name: "redfish", Type: v1alpha1.MethodRedfish, Redfish: &v1alpha1.RedfishMethod{
				CredentialsSecretRef: v1alpha1.SecretReference{Namespace: ns, Name: "bmc"}, CABundleSecretRef: &v1alpha1.SecretReference{Namespace: ns, Name: "ca"}}}
			on := func() { svc.SetPower(0, true) }
			return m, on, []client.Object{node, secret("bmc", map[string]string{"username": svc.Username(), "password": svc.Password()}),
				secret("ca", map[string]string{redfish.CABundleKey: string(svc.CACert())})}
		}},
		{"aws", func(b *testing.B) (v1alpha1.Method, func(), []client.Object) {
			const id = "i-0a1b2c3d4e5f60718"
			ep := ec2sim.Start(b, ec2sim.Options{Instances: []string{id}})
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + id}}
			m := v1alpha1.Method{Name: "ec2", Type: v1alpha1.MethodAWS, AWS: &v1alpha1.AWSMethod{Endpoint: ep.URL(),
				CredentialsSecretRef: &v1alpha1.SecretReference{Namespace: ns, Name: "aws"}}}
			on := func() { ep.SetRunning(id) }
			return m, on, []client.Object{node, secret("aws", map[string]string{aws.KeyAccessKeyID: ep.AccessKeyID(), aws.KeySecretAccessKey: ep.SecretAccessKey()})}
		}},
		{"vsphere", func(b *testing.B) (v1alpha1.Method, func(), []client.Object) {
			model := simulator.VPX()
			if err := model.Create(); err != nil {
				b.Fatal(err)
			}
			model.Service.TLS = new(tls.Config)
			srv := model.Service.NewServer()
			b.Cleanup(func() { srv.Close(); model.Remove() })
			vm := model.Map().Any("VirtualMachine").(*simulator.VirtualMachine)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: corev1.NodeSpec{ProviderID: "vsphere://" + vm.Config.Uuid}}
			m := v1alpha1.Method{Name: "vsphere", Type: v1alpha1.MethodVSphere, VSphere: &v1alpha1.VSphereMethod{Server: srv.URL.Host,
				CredentialsSecretRef: v1alpha1.SecretReference{Namespace: ns, Name: "vc"}, CABundleSecretRef: &v1alpha1.SecretReference{Namespace: ns, Name: "ca"}}}
			lockCtx := simulator.NewContext()
			on := func() {
				model.Map().WithLock(lockCtx, vm.Reference(), func() {
					vm.Runtime.PowerState, vm.Summary.Runtime.PowerState = vimtypes.VirtualMachinePowerStatePoweredOn, vimtypes.VirtualMachinePowerStatePoweredOn
				})
			}
			return m, on, []client.Object{node, secret("vc", map[string]string{"username": "fencer", "password": "vc-pw"}),
				secret("ca", map[string]string{power.CABundleKey: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))})}
		}},
		{"storagegateway", func(b *testing.B) (v1alpha1.Method, func(), []client.Object) {
			host := storagehost.Start(b, netns.New(b), "storage")
			certs := storagehost.WriteCerts(b, b.TempDir(), host.IP())
			g, err := gateway.New(context.Background(), gateway.Config{NFT: host.NFT(), StateDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			cfg, err := gateway.ServerTLSConfig(certs.CertFile, certs.KeyFile, certs.CAFile, logr.Discard())
			if err != nil {
				b.Fatal(err)
			}
			addr := host.ServeTLS(b, gateway.NewHandler(g, "storage-1", logr.Discard()), cfg)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
				Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.20.0.1"}}}}
			m := v1alpha1.Method{Name: "gateway", Type: v1alpha1.MethodStorageGateway, StorageGateway: &v1alpha1.StorageGatewayMethod{
				Gateways: []string{addr}, TLSSecretRef: v1alpha1.SecretReference{Namespace: ns, Name: "gw"}}}
			tlsSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Data: map[string][]byte{
				storagegateway.KeyCA: certs.CA.CertPEM(), storagegateway.KeyCert: certs.Client.CertPEM, storagegateway.KeyKey: certs.Client.KeyPEM}}
			return m, func() {}, []client.Object{node, tlsSecret} // each run's fence has a newer token
		}},
		{"networkfence", func(b *testing.B) (v1alpha1.Method, func(), []client.Object) {
			storage = testbed.StartT(b, testbed.Options{CSIAddons: true, NoCSIAttacher: true})
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{v1alpha1.AnnotationStorageCIDRs: "10.20.0.1/32"}}}
			if err := storage.Client.Create(context.Background(), node); err != nil {
				b.Fatal(err)
			}
			m := v1alpha1.Method{Name: "storage", Type: v1alpha1.MethodNetworkFence,
				NetworkFence: &v1alpha1.NetworkFenceMethod{NetworkFenceClassName: testbed.NetworkFenceClassName}}
			return m, func() {}, nil // each run's fence has a NetworkFence of its own
		}},
	}
	for _, pr := range peers {
		b.Run(pr.name, func(b *testing.B) {
			m, powerOn, objs := pr.peer(b)
			reader := fake.NewClientBuilder().WithObjects(objs...).Build()
			f := map[string]providers.Fencer{"ipmi": ipmi.New(reader), "redfish": redfish.New(reader), "aws": aws.New(reader), "vsphere": vsphere.New(reader),
				"storagegateway": storagegateway.New(reader)}[pr.name]
			if pr.name == "networkfence" {
				f = networkfence.New(storage.Client, storage.Client)
			}
			var fences, confirms []float64
			for run := range providerRuns {
				powerOn()
				nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: types.UID(fmt.Sprintf("fence-%d", run))}, Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1"},
					Status: v1alpha1.NodeFenceStatus{Token: int64(run + 1)}}
				req := providers.Request{Fence: nf, Method: m, Attempt: 1, Now: time.Now()}
				start := time.Now()
				if _, err := f.Fence(context.Background(), req); err != nil {
					b.Fatalf("%s: Fence: %v", pr.name, err)
				}
				fenced := time.Now()
				for attempt := int32(1); ; attempt++ {
					req.Attempt, req.Now = attempt, time.Now()
					st, err := f.Check(context.Background(), req)
					if err != nil {
						b.Fatalf("%s: Check: %v", pr.name, err)
					}
					if st.State == providers.Confirmed {
						break
					}
					if time.Since(fenced) > 30*time.Second {
						b.Fatalf("%s: not confirmed in 30s: %+v", pr.name, st)
					}
					time.Sleep(100 * time.Millisecond)
				}
				fences, confirms = append(fences, fenced.Sub(start).Seconds()), append(confirms, time.Since(fenced).Seconds())
			}
			fmt.Printf("BENCH provider name=%s fence_s=%.4f confirm_s=%.4f runs=%d\n", pr.name, medianOf(fences), medianOf(confirms), providerRuns)
		})
	}
}
