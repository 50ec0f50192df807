// Package redfish is the Redfish fencing method: through bmclib's Redfish (gofish) provider
// and nothing else, it sends ComputerSystem.Reset with ResetType ForceOff to the node's
// system and confirms by reading the system's PowerState back (the power package's fence).
// The BMC is the node's palisade.dev/bmc-address ("host" or "host:port", port 443 by
// default); its system is the one named by the node's palisade.dev/redfish-system annotation
// (a Name more than one system has is a BadTarget: Redfish keeps only Ids unique, so the
// systems are listed before any command), or the only system the service has. Before the off
// (or on) command, and before a read of a BMC named by a host name (resolved once per call),
// that system's UUID must be the node's status.nodeInfo.systemUUID, or the
// same with its first three groups byte-swapped; another is a BadTarget and nothing is sent
// (a UUID missing on either side is not compared). Credentials come from the method's Secret (or the one
// the node's palisade.dev/bmc-secret names); with session auth (the default) bmclib opens a
// session and deletes it after each call, with basic auth it sends them on every request. TLS
// is verified against the CA bundle from the method's caBundleSecretRef (key ca.crt), else
// the system's CAs; it is skipped only when the method says insecureSkipVerify, which the
// policy reports with a warning condition.
package redfish
