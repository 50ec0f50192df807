// Package agent is the direct heartbeat channel between the node agents and the controller,
// independent of the API server. Every agent POSTs a small JSON Report to the controller's
// Server at HeartbeatPath over mutually authenticated TLS (TLS 1.3, HTTP/2, one long-lived
// connection per agent); the Server believes only the node name in the agent's client
// certificate, rejects a Report naming another node (403), and keeps the latest Heartbeat of
// every node for the classifier (Snapshot, then Signals for the classify package). Client is
// the agent's side.
//
// # Commands
//
// The same channel carries orders back: SetCommand makes a Command pending for one node, and
// the Server answers every heartbeat of that node (of that certificate's node, never another)
// with 200 and {"command": {...}} until ClearCommand; other heartbeats get 204. Client.Send
// returns the command. The agent carries out each command ID at most once, in the background,
// and reports an ExecutorStatus (Running, then Confirmed or Failed) in every later heartbeat;
// the Server keeps the latest one per node (ExecutorStatus), also across heartbeats without one
// (an agent restarted since). An invalid status is dropped, its heartbeat still recorded, so
// that a malformed status never makes a live node look dead. To retry, the controller sets a
// command with a new ID. Confirmed is the agent's own word: a controller that must not trust
// it (an agent started with --fault-report-confirmed-early lies on purpose) confirms by
// other means.
//
// # Issuance
//
// A small CA (NewCA: ECDSA P-256, self-signed, valid 10 years) signs everything. Certificates go
// through the Kubernetes CertificateSigningRequest API, as the kubelet's client certificate
// does (package pki is the controller's side, palisade-agent --request-certificate the
// agent's):
//
//   - The controller (--agent-ca-secret) creates the CA once and keeps it in a Secret in its
//     own namespace (tls.crt, tls.key; LoadCA reads it back), readable by the controller's
//     ServiceAccount only, and publishes the CA certificate in a ConfigMap (ca.crt,
//     --agent-ca-configmap) that agents may read. Every replica issues its own server
//     certificate (IssueServer, for the heartbeat Service's DNS names, --agent-tls-hosts) into
//     the files the Server reads, and reissues it past its half-life.
//   - Each agent generates its own key (it never leaves the node) and sends a CSR with
//     signerName palisade.dev/agent, CommonName = its node name, usages client auth and digital
//     signature, authenticated by its pod's projected ServiceAccount token. It waits for the
//     certificate (a watch on that CSR), checks it (its key, its node, a client certificate of
//     the published CA) and writes the bundle, the key, then the certificate into --cert-dir,
//     each by an atomic rename.
//   - The leader approves and signs a CSR only when the requester is the agents' ServiceAccount
//     (--agent-service-account), its token is bound to a pod (the API server then records the
//     pod's node in the CSR's spec.extra["authentication.kubernetes.io/node-name"], since
//     Kubernetes 1.30), that node is the CommonName, and the usages are client auth (plus
//     digital signature or key encipherment) only. Anything else is denied with a condition
//     message that says why; a CSR someone else approved is signed only if it passes the same
//     check. The certificate has the node name as CommonName and the client-auth usage only, so
//     a server certificate cannot pose as an agent, and is valid DefaultLeafValidity (24 h).
//
// So a pod can get the certificate of the node it runs on and of no other, without a Secret per
// node, and a stolen token of the agents' ServiceAccount that is not bound to a pod gets
// nothing. IssueAgent still makes agent certificates directly (tests, hand-made set-ups).
//
// Agents reach the active leader only: the heartbeat Service selects the pod labelled
// palisade.dev/agent-endpoint=true, which every replica removes from its own pod at start and
// the leader sets on its own once elected.
//
// # Rotation
//
// The controller and the agents each renew their own certificate once it is past its
// half-life (NeedsRenewal), an agent by a new key and a new CSR; files are replaced by atomic
// renames (KeyPair.WriteFiles, key first), as the kubelet updates a mounted Secret by an atomic
// symlink swap. Neither side watches the files: the Server re-reads its certificate and the
// CA bundle for every TLS handshake (tls.Config.GetConfigForClient), and the Client re-reads
// its certificate for every heartbeat and for every handshake (GetClientCertificate);
// contents that fail to load, say a certificate already replaced while its key is not yet,
// leave the last good pair in use. Connections already open keep the certificates they were
// opened with, so the Client closes its idle connection when its certificate changed, and the
// Server refuses (401, Connection: close) a heartbeat over a connection whose client
// certificate has since expired. The CA bundle may hold the old and the new CA during a CA
// rotation; the Client reads its CA once, so agents pick up a new CA bundle when restarted.
// The controller reads its CA from the Secret at start: to replace the CA, delete the Secret,
// restart the controller's replicas (the first makes a new CA), then the agents (an agent
// whose certificate does not chain to the published bundle requests a new one at start).
//
// A node cut off from the API server gets no renewed certificate: its agent can keep
// heartbeating for the rest of its certificate's validity (12 to 24 h after the last renewal),
// then the Server refuses it and only peer reports speak for the node.
package agent
