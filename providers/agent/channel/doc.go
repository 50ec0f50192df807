// Package channel is the direct, mutually authenticated TLS channel between the node agents
// and the controller, independent of the API server. Every agent POSTs a heartbeat Report
// (config/agentwire) to the controller's Server; the Server believes only the node named in
// the agent's client certificate and keeps the latest Heartbeat of every node for the
// detectors (Snapshot). Its answer carries the node's heartbeat interval, the peers it is to
// probe (a hash ring, peers.go) and, while a fence is under way, the Command to carry out; the
// agent answers with an ExecutorStatus in its later heartbeats. Client is the agent's end.
// The peer probe itself is detectors/peers. Certificates and their rotation: package pki.
package channel
