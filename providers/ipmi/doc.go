// Package ipmi is the IPMI fencing method (a providers.Fencer): it finds a node's BMC from the
// Node's palisade.dev/bmc-address annotation and the method's (or palisade.dev/bmc-secret's)
// Secret, powers the machine off and reads its power state back through bmclib's ipmitool
// provider only (IPMI v2 / RMCP+ "lanplus", cipher suite 3 unless the method says otherwise,
// the password passed to ipmitool through its environment). Every call
// opens its own bmclib client and closes it, so the provider holds no session and no
// credentials between calls, and is bounded by one per-call timeout (15 s by default).
//
// Before bmclib runs, a session-less IPMI "Get Channel Authentication Capabilities" ping tells a
// silent BMC (ReasonUnreachable, in about 3 s instead of ipmitool's 50 s of retries) from one that
// answers and then rejects the session: ipmitool prints the same "Unable to establish IPMI v2 /
// RMCP+ session" for both. Before a command (and before a read of a BMC named by a host name,
// which is resolved once per call), a session-less "Get System GUID" makes sure that the BMC is
// the node's machine's (checkMachine). Errors are classified into providers.Reason values
// from ipmitool's messages, and the password is scrubbed from every error text.
package ipmi
