package app

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/fencing"
)

// inClusterNamespaceFile names the pod's namespace, the leader-election namespace by default.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// leaderLock builds the leader-election Lease lock as controller-runtime would (a Lease named
// LeaderElectionID, the identity hostname_UUID, its own client with a timeout of half the renew
// deadline), so that this replica knows its identity in it: the NodeFence reconciler reads the
// Lease before each step that acts (fencing/leading.go). It sets o.LeaderElectionNS when it was
// empty. nil without leader election.
func leaderLock(cfg *rest.Config, o *Options) (resourcelock.Interface, error) {
	if !o.LeaderElection {
		return nil, nil
	}
	if o.LeaderElectionNS == "" {
		b, err := os.ReadFile(inClusterNamespaceFile)
		if err != nil {
			return nil, fmt.Errorf("no --leader-election-namespace and no pod namespace to default it to (%s): %w", inClusterNamespaceFile, err)
		}
		o.LeaderElectionNS = strings.TrimSpace(string(b))
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("the leader-election identity: %w", err)
	}
	o.leaderIdentity = host + "_" + string(uuid.NewUUID())
	renew := o.RenewDeadline
	if renew <= 0 {
		renew = defaultRenewDeadline
	}
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, o.LeaderElectionNS, LeaderElectionID,
		resourcelock.ResourceLockConfig{Identity: o.leaderIdentity}, cfg, renew)
	if err != nil {
		return nil, fmt.Errorf("creating the leader-election lock: %w", err)
	}
	return lock, nil
}

// leaderCheck is the NodeFence reconciler's check of leadership, nil without leader election.
func leaderCheck(reader client.Reader, o Options) fencing.LeaderCheck {
	if !o.LeaderElection {
		return nil
	}
	return &fencing.LeaderLease{Reader: reader, Key: types.NamespacedName{Namespace: o.LeaderElectionNS, Name: LeaderElectionID}, Identity: o.leaderIdentity}
}
