package e2e

import (
	"context"
	"testing"

	"palisade.dev/palisade/test/agentapi"
	"palisade.dev/palisade/test/scenario"
)

// agentAPIArgs gives an agent the API server as a pod would have it (agentapi.Args),
// at server ("" for the API server's own address, e.g. a relay's otherwise).
func agentAPIArgs(t *testing.T, env *scenario.Env, server, tlsName string) []string {
	t.Helper()
	if server == "" {
		server = env.Cluster.Config.Host
	}
	args, err := agentapi.Args(context.Background(), env.Cluster.Kube, env.Cluster.Config.CAData, t.TempDir(), server, tlsName)
	if err != nil {
		t.Fatal(err)
	}
	return args
}
