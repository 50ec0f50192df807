package testbed

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// auditLog is the API server's audit log under Dir (Options.AuditLog).
const auditLog = "audit.log"

// auditPolicy records, at RequestResponse, every accepted write to the objects a release
// touches (a pod's status too: marking a pod Failed releases it) and to NodeFences; nothing
// else (the kubelets' Node status and Lease writes would drown it).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["nodes", "pods", "pods/status"]
  - group: "storage.k8s.io"
    resources: ["volumeattachments"]
  - group: "fencing.palisade.dev"
    resources: ["nodefences", "nodefences/status"]
- level: None
`

// AuditLogPath is the API server's audit log (JSON lines of audit.k8s.io/v1 Events), written
// when the Cluster started with Options.AuditLog.
func (c *Cluster) AuditLogPath() string { return filepath.Join(c.Dir, auditLog) }

func (c *Cluster) configureAudit(api *envtest.APIServer) error {
	policy := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return fmt.Errorf("writing the audit policy: %w", err)
	}
	api.Configure().
		Set("audit-policy-file", policy).
		Set("audit-log-path", c.AuditLogPath()).
		Set("audit-log-format", "json").
		Set("audit-log-mode", "blocking")
	return nil
}
