// Package signer is the controller's side of the agents' certificates, issued through the
// Kubernetes CertificateSigningRequest API the way the kubelet gets its client certificate.
//
// The controller keeps the heartbeat channel's CA in a Secret of its own namespace (EnsureCA
// creates it on first start, pki.LoadCA reads it back) and publishes the CA certificate, never
// its key, in a ConfigMap (PublishBundle) from which agents read the bundle the controller's
// server certificate chains to. ServerCert issues the controller's own heartbeat-server
// certificate into files and reissues it past its half-life.
//
// An agent sends a CSR with signerName SignerName, CommonName = its node name and the client
// auth usage, authenticated by its pod's ServiceAccount token. Signer, a reconciler of such
// CSRs, approves and signs one only when the requester is the agents' ServiceAccount, the
// token was bound to a pod on a node (the API server records that node in the CSR's
// spec.extra[NodeNameExtra], from pod-bound tokens since Kubernetes 1.30) and that node is the
// certificate's CommonName, and the usages are client auth (plus digital signature or key
// encipherment) only. Anything else is denied, with a condition message saying why; a CSR
// approved by someone else is signed only when it passes the same check (otherwise it gets a
// Failed condition). CSRs of other signers are never touched.
package signer
