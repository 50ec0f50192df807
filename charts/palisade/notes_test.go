package palisade_test

import (
	"regexp"
	"strings"
	"testing"
)

// notes renders NOTES.txt with vals.
func notes(t *testing.T, vals map[string]any) string {
	t.Helper()
	out, err := renderFiles(t, loadChart(t), vals)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	n, ok := out["palisade/templates/NOTES.txt"]
	if !ok {
		t.Fatal("no NOTES.txt rendered")
	}
	if strings.Contains(n, "<no value>") || strings.Contains(n, "%!") {
		t.Errorf("NOTES.txt refers to a missing value:\n%s", n)
	}
	return n
}

// stepNumbers are the numbers of the NOTES' steps, in order.
func stepNumbers(n string) []string {
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^([0-9]+)\. `).FindAllStringSubmatch(n, -1) {
		got = append(got, m[1])
	}
	return got
}

// TestNotes: the notes tell the next steps concretely, in the release's namespace and names,
// numbered without gaps with or without the agent, and say what monitoring there is.
func TestNotes(t *testing.T) {
	n := notes(t, nil)
	for _, want := range []string{
		"installed in namespace " + namespace,
		"kubectl -n palisade-system get pods -l app.kubernetes.io/instance=palisade,app.kubernetes.io/component=controller",
		"get lease palisade-controller.fencing.palisade.dev",
		"kubectl -n palisade-system get daemonset palisade-agent",
		"kubectl get csr --field-selector spec.signerName=palisade.dev/agent",
		"Secret palisade-agent-ca",
		"kubectl label namespace palisade-system pod-security.kubernetes.io/enforce=privileged",
		"kubectl -n palisade-system create secret generic bmc-credentials",
		"kubectl annotate node <node> palisade.dev/bmc-address=",
		"examples/fencingpolicy.yaml",
		"credentialsSecretRef: {namespace: palisade-system, name: bmc-credentials}",
		"kubectl get nodefences",
		"kubectl palisade status",
		"system:masters",
		"Service palisade-metrics",
		"metrics.serviceMonitor.enabled",
		"helm test palisade -n palisade-system",
	} {
		if !strings.Contains(n, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, n)
		}
	}
	if got := strings.Join(stepNumbers(n), ","); got != "1,2,3,4,5,6" {
		t.Errorf("steps numbered %s, want 1 to 6", got)
	}

	n = notes(t, map[string]any{"agent": map[string]any{"enabled": false}, "metrics": monitoringOn["metrics"]})
	if got := strings.Join(stepNumbers(n), ","); got != "1,2,3,4,5" {
		t.Errorf("without the agent: steps numbered %s, want 1 to 5", got)
	}
	if strings.Contains(n, "palisade-agent") || strings.Contains(n, "enforce=privileged") {
		t.Errorf("without the agent, NOTES.txt still speaks of it:\n%s", n)
	}
	for _, want := range []string{"ServiceMonitor palisade scrapes", "PrometheusRule palisade holds the alerts", "ConfigMap palisade-dashboard in palisade-system"} {
		if !strings.Contains(n, want) {
			t.Errorf("with monitoring, NOTES.txt lacks %q:\n%s", want, n)
		}
	}
}
