package app

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// --agent-service-account is namespace/name or nothing: a value that is neither stops the
// controller at its start, rather than leaving the AgentsSilent hold judging by every node.
func TestAgentServiceAccountFlag(t *testing.T) {
	for _, tt := range []struct {
		flag    string
		want    types.NamespacedName
		invalid bool
	}{
		{"", types.NamespacedName{}, false},
		{"palisade-system/palisade-agent", types.NamespacedName{Namespace: "palisade-system", Name: "palisade-agent"}, false},
		{"palisade-agent", types.NamespacedName{}, true},
		{"/palisade-agent", types.NamespacedName{}, true},
		{"palisade-system/", types.NamespacedName{}, true},
		{"a/b/c", types.NamespacedName{}, true},
	} {
		var o Options
		o.AgentCerts.AgentServiceAccount = tt.flag
		got, err := agentServiceAccount(o)
		if got != tt.want || (err != nil) != tt.invalid {
			t.Errorf("--agent-service-account=%q: %v, %v; want %v, invalid %v", tt.flag, got, err, tt.want, tt.invalid)
		}
	}
}
