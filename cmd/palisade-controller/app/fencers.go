package app

import (
	"maps"

	ctrl "sigs.k8s.io/controller-runtime"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/agent"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/aws"
	"palisade.dev/palisade/providers/ipmi"
	"palisade.dev/palisade/providers/metrics"
	"palisade.dev/palisade/providers/networkfence"
	"palisade.dev/palisade/providers/redfish"
	"palisade.dev/palisade/providers/storagegateway"
	"palisade.dev/palisade/providers/vsphere"
)

// fencers is the registry of fencing providers, one per method type, each wrapped once by the
// metrics decorator. Adding a method: one line here, beside its provider package and its row
// in fencing's table of method kinds. Without the agents' heartbeat server
// (--agent-listen-address) the Executor method has no provider and fails with NoProvider.
func fencers(mgr ctrl.Manager, o Options, obs observe.Observer, srv *channel.Server) map[v1alpha1.MethodType]providers.Fencer {
	reg := map[v1alpha1.MethodType]providers.Fencer{
		v1alpha1.MethodIPMI:      ipmi.New(mgr.GetAPIReader(), o.IPMI...),
		v1alpha1.MethodRedfish:   redfish.New(mgr.GetAPIReader(), o.Redfish...),
		v1alpha1.MethodAWS:       aws.New(mgr.GetAPIReader(), o.AWS...),
		v1alpha1.MethodVSphere:   vsphere.New(mgr.GetAPIReader(), o.VSphere...),
		v1alpha1.MethodSelfFence: agent.NewSelfFence(obs),
		// NetworkFences are read straight from the API server: a cluster without
		// csi-addons costs no informer, and a fence reads the manager's latest answer.
		v1alpha1.MethodNetworkFence:   networkfence.New(mgr.GetClient(), mgr.GetAPIReader()),
		v1alpha1.MethodStorageGateway: storagegateway.New(mgr.GetAPIReader()),
	}
	if srv != nil {
		reg[v1alpha1.MethodExecutor] = agent.New(srv, mgr.GetClient())
	}
	maps.Copy(reg, o.Fencers)
	for t, f := range reg {
		reg[t] = metrics.Decorate(f)
	}
	return reg
}
