// Package pki holds the agents' certificates, in one place: a small CA (NewCA, LoadCA) that
// issues the controller's server certificate and the agents' client certificates, atomic file
// writes, and FileSource, which re-reads certificate files when they change (rotation without
// restarts). Subpackage signer is the controller's side of issuance through the Kubernetes CSR
// API; Requester (request.go) the agent's.
//
// # Issuance
//
// A small CA (NewCA: ECDSA P-256, self-signed, valid 10 years) signs everything. Certificates go
// through the Kubernetes CertificateSigningRequest API, as the kubelet's client certificate
// does (package signer is the controller's side, Requester the
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
package pki
