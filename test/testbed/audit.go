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
// touches (a pod's status too: marking a pod Failed releases it), to Node status (a node's boot
// ID and readiness, which an unfence must follow: the checker's check (f)) and to NodeFences;
// nothing else (Lease renewals would drown it). A kubelet writes its Node's status only when it
// changes, and at least every five minutes.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
omitManagedFields: true
rules:
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["nodes", "nodes/status", "pods", "pods/status"]
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
		Set("audit-log-mode", "blocking").
		// One file, never rotated (the default rotates it at 100 MB, and ReadAudit reads only it).
		Set("audit-log-maxsize", "100000")
	return nil
}
