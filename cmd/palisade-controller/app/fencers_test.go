package app

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/metrics"
)

// Every method type of the API has a provider in the registry (the Executor's needs the agents'
// server), each behind the metrics decorator, with a name of its own; a call through one is
// counted by provider, method and reason.
func TestEveryProviderIsRegisteredAndMeasured(t *testing.T) {
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := fencers(mgr, Options{}, observe.Observer{}, nil)
	all := []v1alpha1.MethodType{v1alpha1.MethodIPMI, v1alpha1.MethodRedfish, v1alpha1.MethodAWS, v1alpha1.MethodVSphere, v1alpha1.MethodSelfFence, v1alpha1.MethodNetworkFence, v1alpha1.MethodStorageGateway}
	names := map[string]v1alpha1.MethodType{}
	for _, typ := range all {
		f, ok := reg[typ]
		if !ok {
			t.Errorf("no provider for method type %s", typ)
			continue
		}
		if !metrics.Decorated(f) {
			t.Errorf("the provider of %s is not behind the metrics decorator", typ)
		}
		if other, dup := names[f.Name()]; dup || f.Name() == "" {
			t.Errorf("the provider of %s is named %q, as %s's", typ, f.Name(), other)
		}
		names[f.Name()] = typ
	}
	if len(reg) != len(all) {
		t.Errorf("%d providers without the agents' server, want %d (the Executor needs it)", len(reg), len(all))
	}

	r := prometheus.NewRegistry()
	metrics.Register(r)
	f := reg[v1alpha1.MethodRedfish]
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}}
	_, err = f.Fence(context.Background(), providers.Request{Fence: nf, Method: v1alpha1.Method{Name: "rf", Type: v1alpha1.MethodRedfish}, Now: time.Now()})
	if providers.ReasonOf(err) != providers.ReasonBadTarget {
		t.Fatalf("Fence without settings = %v, want BadTarget", err)
	}
	mfs, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted, timed := false, false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if mf.GetName() == "palisade_provider_errors_total" && labels["provider"] == "redfish" && labels["method"] == "Fence" && labels["reason"] == "BadTarget" && m.GetCounter().GetValue() >= 1 {
				counted = true
			}
			if mf.GetName() == "palisade_provider_duration_seconds" && labels["provider"] == "redfish" && labels["method"] == "Fence" && m.GetHistogram().GetSampleCount() >= 1 {
				timed = true
			}
		}
	}
	if !counted || !timed {
		t.Errorf("after a failed Fence through the redfish provider: error counted %v, duration observed %v; want both", counted, timed)
	}
}
