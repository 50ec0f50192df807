package ipmi

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers/power"
)

// guidTimeout bounds the session-less Get System GUID before a command, and before a read of a
// BMC named by a host name (at most a quarter of
// the call's timeout, so that ping and GUID leave ipmitool half of it). The BMC has just
// answered the ping, so a BMC that keeps quiet now does not serve the request outside a
// session: the fence goes on without the comparison rather than wait longer.
const guidTimeout = time.Second

// guidPacket is a session-less IPMI v1.5 "Get System GUID" request (netFn App, command 0x37),
// which IPMI v2.0 lets a BMC answer before any session, as ipmi_sim does. Its sequence number
// is 1, so that a late answer to a ping (sequence 0) is never taken for its answer.
var guidPacket = appRequest(1, 0x37)

// errNotGUIDAnswer marks a datagram that is not an answer to guidPacket (a late pong, a
// datagram cut short, a bad checksum): exchange keeps waiting for the answer.
var errNotGUIDAnswer = errors.New("not an answer to Get System GUID")

// parseGUIDAnswer reads a BMC's session-less answer to guidPacket: the 16 bytes of its system
// GUID in the order it sent them. A well-formed answer that refuses (a completion code other
// than 0) or carries no 16 bytes is an error of its own; anything else is errNotGUIDAnswer.
func parseGUIDAnswer(b []byte) ([16]byte, error) {
	var guid [16]byte
	// RMCP (4 bytes), then a session-less IPMI v1.5 session header: auth type none, sequence
	// and session id (9 bytes), the message length.
	if len(b) < 14 || b[0] != 0x06 || b[3]&0x1f != 0x07 || b[4] != 0x00 {
		return guid, errNotGUIDAnswer
	}
	msg := b[14:]
	if int(b[13]) > len(msg) {
		return guid, fmt.Errorf("%w: message of %d bytes cut to %d", errNotGUIDAnswer, b[13], len(msg))
	}
	msg = msg[:b[13]]
	// requester, netFn/LUN, checksum, responder, sequence/LUN, command, completion code, data,
	// checksum
	if len(msg) < 8 || checksum(msg[:2]) != msg[2] || checksum(msg[3:len(msg)-1]) != msg[len(msg)-1] {
		return guid, fmt.Errorf("%w: malformed message", errNotGUIDAnswer)
	}
	if msg[1]>>2 != 0x07 || msg[4]>>2 != 1 || msg[5] != 0x37 {
		return guid, fmt.Errorf("%w: netFn 0x%02x, sequence %d, command 0x%02x", errNotGUIDAnswer, msg[1]>>2, msg[4]>>2, msg[5])
	}
	if cc := msg[6]; cc != 0 {
		return guid, fmt.Errorf("the BMC refused Get System GUID outside a session (completion code 0x%02x)", cc)
	}
	data := msg[7 : len(msg)-1]
	if len(data) != len(guid) {
		return guid, fmt.Errorf("the BMC answered Get System GUID with %d bytes, not 16", len(data))
	}
	copy(guid[:], data)
	return guid, nil
}

// systemGUID asks the BMC at addr for its system GUID outside a session.
func systemGUID(ctx context.Context, addr string, timeout time.Duration) ([16]byte, error) {
	var guid [16]byte
	var answerErr error
	start := time.Now()
	answered, err := exchange(ctx, addr, guidPacket, timeout, func(b []byte) bool {
		g, err := parseGUIDAnswer(b)
		if errors.Is(err, errNotGUIDAnswer) {
			return false
		}
		guid, answerErr = g, err
		return true
	})
	switch {
	case err != nil:
		return guid, fmt.Errorf("asking for the system GUID: %w", err)
	case !answered:
		return guid, fmt.Errorf("no answer to Get System GUID outside a session from %s in %s", addr, time.Since(start).Round(time.Millisecond))
	}
	return guid, answerErr
}

// guidText writes the 16 bytes as a UUID, in the order the BMC sent them.
func guidText(g [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", g[0:4], g[4:6], g[6:8], g[8:10], g[10:16])
}

// guidReadings are the texts a BMC's GUID may stand for. The IPMI specification sends the GUID
// least significant byte first, but BMCs also send it in the SMBIOS order the kubelet's
// systemUUID comes from, or as the UUID is written: the bytes as sent and reversed, each
// compared with power.SameUUID, which also allows the first three groups swapped.
func guidReadings(g [16]byte) []string {
	r := g
	slices.Reverse(r[:])
	return []string{hex.EncodeToString(g[:]), hex.EncodeToString(r[:])}
}

// errOtherMachine marks a BMC whose system GUID is not the node's systemUUID.
var errOtherMachine = errors.New("not the node's machine")

// checkMachine makes sure, before a command (and before a read of a BMC named by a host name,
// which the next call may resolve to another machine), that the BMC at addr controls the
// node's machine.
//
// A wrong palisade.dev/bmc-address (two nodes' swapped, a typo naming another live server)
// would power off another machine and read it back Off while the node runs on. The BMC's system
// GUID is the machine's SMBIOS UUID, which the kubelet reports as the node's systemUUID: when
// the BMC tells it, in any of its byte orders (guidReadings), it must be the node's, or the
// command is not sent (errOtherMachine, which the provider reports as BadTarget).
//
// Nothing is compared when the node reports no SMBIOS UUID (empty, a placeholder, a machine-id:
// power.NodeSMBIOSUUID), when the BMC's GUID is a placeholder, or when the BMC does not answer Get
// System GUID outside a session within timeout: such a BMC cannot be checked this way, and the
// verify window still catches a node that runs on after its fence. The command's step says so
// (power.NotIdentified), and why.
func checkMachine(ctx context.Context, addr string, t Target, timeout time.Duration, log logr.Logger) error {
	if !power.NodeSMBIOSUUID(t.SystemUUID) {
		power.NotIdentified(ctx, "%s", cmp.Or(t.Unidentified, "the node reports no SMBIOS UUID"))
		return nil
	}
	guid, err := systemGUID(ctx, addr, timeout)
	if err != nil {
		log.V(1).Info("the BMC's system GUID is not compared with the node's systemUUID", "error", err.Error())
		power.NotIdentified(ctx, "the BMC did not tell its system GUID outside a session: %v", err)
		return nil
	}
	readings := guidReadings(guid)
	for _, r := range readings {
		if !power.VerifiableUUID(r) {
			power.NotIdentified(ctx, "the BMC's system GUID %s is a placeholder, the same on many machines", guidText(guid))
			return nil
		}
	}
	for _, r := range readings {
		if power.SameUUID(r, t.SystemUUID) {
			return nil
		}
	}
	return fmt.Errorf("%w: the BMC at %s says its system GUID is %s (the bytes as sent, as `ipmitool raw 0x06 0x37` prints them), and none of its byte orders is node %s's systemUUID %s: the node's %s names a machine that is not the node's, and no command was sent to it; set it to the node's own BMC (only if it is the node's own BMC and it reports another identity, annotate the node %s=false)",
		errOtherMachine, t.Address, guidText(guid), t.Node, power.BareUUID(t.SystemUUID), v1alpha1.AnnotationBMCAddress, v1alpha1.AnnotationBMCIdentityCheck)
}
