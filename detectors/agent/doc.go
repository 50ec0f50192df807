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
// A small CA (NewCA: ECDSA P-256, self-signed, valid 10 years) signs everything. The controller
// creates it once and keeps it in a Secret in its own namespace (tls.crt, tls.key; LoadCA reads
// it back), readable by the controller's ServiceAccount only. From it the controller issues its
// own server certificate (IssueServer, for the heartbeat Service's DNS names and IPs) and one
// client certificate per node (IssueAgent: CommonName = the node name, client-auth usage only,
// so a server certificate cannot pose as an agent), valid DefaultLeafValidity (24 h). Each
// agent certificate goes into a Secret per node (tls.crt, tls.key, ca.crt) that the agent pod
// of that node mounts. A DaemonSet's pod template is the same on every node, so it cannot name
// the node's Secret in a plain volume: the pod needs a step that picks its own node's Secret
// (an init container reading it through the API with spec.nodeName from the downward API), or
// the controller must hand certificates out itself (the agent sends a key of its own with its
// pod-bound ServiceAccount token, the controller checks it with a TokenReview, whose node-name
// extra says which node the pod runs on). Either is wiring outside this package.
//
// # Rotation
//
// The issuer reissues a certificate once it is past its half-life (NeedsRenewal) and replaces
// the Secret; the kubelet updates the mounted files by an atomic symlink swap (KeyPair.
// WriteFiles writes files the same way, key first). Neither side watches the files: the Server
// re-reads its certificate and the CA bundle for every TLS handshake (tls.Config.
// GetConfigForClient), and the Client re-reads its certificate for every heartbeat and for
// every handshake (GetClientCertificate); contents that fail to load, say a certificate
// already replaced while its key is not yet, leave the last good pair in use. Connections
// already open keep the certificates they were opened with, so the Client closes its idle
// connection when its certificate changed, and the Server refuses (401, Connection: close) a
// heartbeat over a connection whose client certificate has since expired. The CA bundle may
// hold the old and the new CA during a CA rotation; the Client reads its CA once, so agents
// pick up a new CA bundle when restarted.
//
// A node cut off from the API server gets no renewed certificate: its agent can keep
// heartbeating for the rest of its certificate's validity (12 to 24 h after the last renewal),
// then the Server refuses it and only peer reports speak for the node.
package agent
