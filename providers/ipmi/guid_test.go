package ipmi

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
	"palisade.dev/palisade/test/testbed/ipmisim"
)

// answers are datagrams as ipmi_sim sent them (captured on this machine), and ones made from
// them.
const (
	// ipmi_sim's answer to guidPacket, its GUID configured as 0123456789abcdef0011223344556677.
	simGUIDAnswer = "0600ff0700000000000000000018811c63200437000123456789abcdef001122334455667709"
	// ipmi_sim's answer to a session-less App command it does not serve outside a session
	// (0x99, sequence 2): completion code 0xd5.
	simRefusal = "0600ff0700000000000000000008811c63200899d56a"
	// simRefusal made an answer to guidPacket: sequence 1, command 0x37, completion code 0xd4.
	guidRefusal = "0600ff0700000000000000000008811c63200437d4d1"
	// ipmi_sim's answer to the ping (sequence 0, command 0x38).
	pongAnswer = "0600ff0700000000000000000010811c6320003800019704030000000009"
)

func decode(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The requests are the bytes ipmitool's first message and ipmi_sim's answers were measured
// with: the ping as ipmitool sends it, Get System GUID with sequence 1.
func TestRequestBytes(t *testing.T) {
	if got, want := hex.EncodeToString(pingPacket), "0600ff07 00 00000000 00000000 09 2018c8 810038 8e04b5"; got != strings.ReplaceAll(want, " ", "") {
		t.Errorf("ping = %s, want %s", got, want)
	}
	if got, want := hex.EncodeToString(guidPacket), "0600ff07 00 00000000 00000000 07 2018c8 810437 44"; got != strings.ReplaceAll(want, " ", "") {
		t.Errorf("Get System GUID = %s, want %s", got, want)
	}
}

// The request is a well-formed session-less IPMI message: both checksums hold.
func TestGUIDPacket(t *testing.T) {
	msg := guidPacket[14:]
	if int(guidPacket[13]) != len(msg) || checksum(msg[:2]) != msg[2] || checksum(msg[3:len(msg)-1]) != msg[len(msg)-1] {
		t.Fatalf("malformed Get System GUID request % x", guidPacket)
	}
}

func TestParseGUIDAnswer(t *testing.T) {
	guid, err := parseGUIDAnswer(decode(t, simGUIDAnswer))
	if err != nil || hex.EncodeToString(guid[:]) != "0123456789abcdef0011223344556677" {
		t.Fatalf("ipmi_sim's answer: %x, %v", guid, err)
	}
	if _, err := parseGUIDAnswer(decode(t, guidRefusal)); err == nil || errors.Is(err, errNotGUIDAnswer) || !strings.Contains(err.Error(), "0xd4") {
		t.Errorf("a refusal: %v, want an error naming its completion code", err)
	}
	short := decode(t, simGUIDAnswer)
	short = short[:len(short)-3] // 14 bytes of GUID, the checksum recomputed
	short[13] -= 2
	short = append(short, checksum(short[17:]))
	if _, err := parseGUIDAnswer(short); err == nil || errors.Is(err, errNotGUIDAnswer) || !strings.Contains(err.Error(), "14 bytes") {
		t.Errorf("an answer of 14 bytes: %v, want an error", err)
	}
	bad := decode(t, simGUIDAnswer)
	bad[len(bad)-1]++
	for name, b := range map[string][]byte{
		"the refusal of another command": decode(t, simRefusal),
		"an answer to the ping":          decode(t, pongAnswer),
		"a bad checksum":                 bad,
		"cut short":                      decode(t, simGUIDAnswer)[:30],
		"empty":                          nil,
		"not RMCP":                       decode(t, "0700ff07"+simGUIDAnswer[8:]),
		"in a session":                   decode(t, "0600ff0702"+simGUIDAnswer[10:]),
	} {
		if _, err := parseGUIDAnswer(b); !errors.Is(err, errNotGUIDAnswer) {
			t.Errorf("%s: %v, want errNotGUIDAnswer", name, err)
		}
	}
}

const simGUID = "00112233445566778899aabbccddeeff" // the bytes a BMC sends

// A BMC whose GUID is another machine's gets no power command: the address names another live
// server, and powering it off would read back Off while the node runs on. Reads still work.
func TestOtherMachineGetsNoCommand(t *testing.T) {
	b := startBMCOf(t, ipmisim.Options{GUID: simGUID})
	p := New(nil)
	target := targetOf(b)
	target.SystemUUID = "00112233-4455-6677-8899-aabbccddee00"

	err := p.PowerOff(context.Background(), target)
	wantReason(t, err, providers.ReasonBadTarget)
	for _, want := range []string{"not the node's machine", "00112233-4455-6677-8899-aabbccddeeff", target.SystemUUID, "palisade.dev/bmc-address"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	wantUntouched(t, b)
	if got := powerState(t, p, target); got != PowerOn {
		t.Errorf("PowerState = %v, want on (reads are not refused)", got)
	}

	if err := b.SetPower(false); err != nil {
		t.Fatal(err)
	}
	wantReason(t, p.PowerOn(context.Background(), target), providers.ReasonBadTarget)
	if poweredOn(t, b) {
		t.Errorf("the other machine was powered on")
	}
}

// The node's own BMC gets its command whichever byte order the BMC sends its GUID in: as the
// UUID is written, with the first three groups swapped (SMBIOS), reversed (IPMI's least
// significant byte first), or reversed and swapped.
func TestNodesMachineInEveryByteOrder(t *testing.T) {
	b := startBMCOf(t, ipmisim.Options{GUID: simGUID})
	p := New(nil)
	for i, uuid := range []string{
		"00112233-4455-6677-8899-aabbccddeeff",
		"33221100-5544-7766-8899-aabbccddeeff",
		"ffeeddcc-bbaa-9988-7766-554433221100",
		"CCDDEEFF-AABB-8899-7766-554433221100",
	} {
		if err := b.SetPower(true); err != nil {
			t.Fatal(err)
		}
		target := targetOf(b)
		target.SystemUUID = uuid
		if err := p.PowerOff(context.Background(), target); err != nil {
			t.Fatalf("node of systemUUID %s: %v", uuid, err)
		}
		if n := offCommands(t, b); n != i+1 || poweredOn(t, b) {
			t.Fatalf("node of systemUUID %s: %d power-off commands, on: %v", uuid, n, poweredOn(t, b))
		}
	}
}

// Nothing is compared when either side names no machine of its own: the node reports no UUID
// (or a placeholder, or something else), or the BMC's GUID is a placeholder. The command goes,
// and the fence's step says that the machine was not checked, and why.
func TestUnverifiableIdentityNotCompared(t *testing.T) {
	const nodeSide = "which is no SMBIOS UUID a BMC could tell"
	for _, tc := range []struct{ name, guid, nodeUUID, why string }{
		{"node reports none", simGUID, "", `node n1 reports systemUUID "", ` + nodeSide},
		{"node reports zeros", simGUID, "00000000-0000-0000-0000-000000000000", nodeSide},
		{"node reports no UUID", simGUID, "simnode-1", `systemUUID "simnode-1", ` + nodeSide},
		{"node reports its machine-id (no SMBIOS tables)", simGUID, "3d1219c7c4c5404aaa1f6d2a48adfda4", nodeSide},
		{"BMC's GUID is zeros", "00000000000000000000000000000000", "00112233-4455-6677-8899-aabbccddee00", "the BMC's system GUID 00000000-0000-0000-0000-000000000000 is a placeholder"},
		{"BMC's GUID is AMI's default, reversed", "09000800070006000005000400020003", "00112233-4455-6677-8899-aabbccddee00", "the BMC's system GUID 09000800-0700-0600-0005-000400020003 is a placeholder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBMCOf(t, ipmisim.Options{GUID: tc.guid})
			_, p, req := fenceScene(t, b, tc.nodeUUID)
			st, err := p.Fence(context.Background(), req)
			if err != nil {
				t.Fatalf("Fence: %v", err)
			}
			if n := offCommands(t, b); n != 1 {
				t.Fatalf("%d power-off commands, want 1", n)
			}
			if !strings.Contains(st.Message, "power-off command accepted") || !strings.Contains(st.Message, "; not checked that it controls the node's machine: ") || !strings.Contains(st.Message, tc.why) {
				t.Errorf("Fence's message %q does not say the machine was not checked: %q", st.Message, tc.why)
			}
		})
	}
}

// A BMC that does not tell its GUID outside a session is not compared: silent, once the
// timeout is over; refusing, at once. The bounds are loose for a loaded machine: 3 s of
// timeout, a refusal well within half of it.
func TestGUIDNotTold(t *testing.T) {
	const timeout = 3 * time.Second
	target := Target{Node: "node-1", SystemUUID: "00112233-4455-6677-8899-aabbccddee00"}
	for name, tc := range map[string]struct {
		answer         []byte
		least, longest time.Duration
	}{
		"silent":  {nil, timeout - 100*time.Millisecond, timeout + 2*time.Second},
		"refuses": {decode(t, guidRefusal), 0, timeout / 2},
	} {
		t.Run(name, func(t *testing.T) {
			var asked atomic.Int32
			addr := fakeBMC(t, func(b []byte) []byte {
				if string(b) == string(guidPacket) {
					asked.Add(1)
					return tc.answer
				}
				return nil
			})
			start := time.Now()
			var logs logSink
			if err := checkMachine(context.Background(), addr, target, timeout, logs.logger()); err != nil {
				t.Fatalf("checkMachine: %v", err)
			}
			if took := time.Since(start); took < tc.least || took > tc.longest || asked.Load() == 0 {
				t.Errorf("took %s (%s to %s), asked %d times", took, tc.least, tc.longest, asked.Load())
			}
			if !strings.Contains(logs.String(), "not compared") {
				t.Errorf("nothing logged: %q", logs.String())
			}
			ctx, notes := power.WithNotes(context.Background())
			if err := checkMachine(ctx, addr, target, timeout, logr.Discard()); err != nil {
				t.Fatalf("checkMachine: %v", err)
			}
			if want := "not checked that it controls the node's machine: the BMC did not tell its system GUID outside a session"; !strings.Contains(notes.String(), want) {
				t.Errorf("notes %q, want %q", notes, want)
			}
		})
	}
	// The same stand-in answering ipmi_sim's GUID is compared, and refused.
	answer := decode(t, simGUIDAnswer)
	addr := fakeBMC(t, func([]byte) []byte { return answer })
	if err := checkMachine(context.Background(), addr, target, timeout, logr.Discard()); !errors.Is(err, errOtherMachine) {
		t.Fatalf("checkMachine = %v, want errOtherMachine", err)
	}
}

// The node's palisade.dev/bmc-identity-check: "false" lets the command through to a BMC whose
// GUID is not the node's (the node's own BMC reporting another identity); any value but
// "true" or "false" fails the fence with BadTarget and sends nothing.
func TestIdentityCheckAnnotation(t *testing.T) {
	b := startBMCOf(t, ipmisim.Options{GUID: "00112233445566778899aabbccddee01"})
	c, p, req := fenceScene(t, b, "00112233-4455-6677-8899-aabbccddeeff")
	_, err := p.Fence(context.Background(), req)
	if providers.ReasonOf(err) != providers.ReasonBadTarget || !strings.Contains(err.Error(), v1alpha1.AnnotationBMCIdentityCheck+"=false") {
		t.Fatalf("Fence with the check: %v, want %s naming the annotation", err, providers.ReasonBadTarget)
	}
	for _, v := range []string{"no", "False", " false"} {
		setAnnotation(t, c, v1alpha1.AnnotationBMCIdentityCheck, v)
		if _, err := p.Fence(context.Background(), req); providers.ReasonOf(err) != providers.ReasonBadTarget || !strings.Contains(err.Error(), "neither") {
			t.Fatalf("Fence with %s=%q: %v, want %s", v1alpha1.AnnotationBMCIdentityCheck, v, err, providers.ReasonBadTarget)
		}
	}
	if n := offCommands(t, b); n != 0 {
		t.Fatalf("%d off commands before the check was turned off", n)
	}
	setAnnotation(t, c, v1alpha1.AnnotationBMCIdentityCheck, "false")
	st, err := p.Fence(context.Background(), req)
	if err != nil {
		t.Fatalf("Fence with %s=false: %v", v1alpha1.AnnotationBMCIdentityCheck, err)
	}
	if n := offCommands(t, b); n != 1 {
		t.Fatalf("%d off commands, want 1", n)
	}
	if want := "not checked that it controls the node's machine: the check is switched off by node n1's annotation " + v1alpha1.AnnotationBMCIdentityCheck + "=false"; !strings.Contains(st.Message, want) {
		t.Errorf("Fence's message %q does not say %q", st.Message, want)
	}

	// The node's own BMC, checked: the step says nothing of it.
	if err := b.SetPower(true); err != nil {
		t.Fatal(err)
	}
	c, p, req = fenceScene(t, b, "00112233-4455-6677-8899-aabbccddee01")
	if st, err := p.Fence(context.Background(), req); err != nil || strings.Contains(st.Message, "not checked") {
		t.Errorf("Fence of the node's own BMC: %+v, %v; want accepted, with no note", st, err)
	}
}

// FuzzParseGUIDAnswer checks the reader of a BMC's answer to Get System GUID, whatever comes
// back: it never panics and reads the same datagram the same way; it takes a GUID only from a
// well-formed answer to this request (RMCP class IPMI, no session, both checksums right,
// netFn App response, sequence 1, command 0x37, completion code 0, 16 bytes), and those 16
// bytes are the datagram's own; bytes after the message change nothing; and it reports a
// refusal or a wrong length only for an answer to this request. The corpus under
// testdata/fuzz/FuzzParseGUIDAnswer holds ipmi_sim's answers.
func FuzzParseGUIDAnswer(f *testing.F) {
	for _, s := range []string{simGUIDAnswer, simRefusal, guidRefusal, pongAnswer, "", "0600ff07"} {
		b, _ := hex.DecodeString(s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		guid, err := parseGUIDAnswer(b)
		if g2, err2 := parseGUIDAnswer(b); g2 != guid || (err == nil) != (err2 == nil) {
			t.Fatalf("parseGUIDAnswer(% x) is not deterministic", b)
		}
		if err != nil && errors.Is(err, errNotGUIDAnswer) {
			return
		}
		// A GUID, a refusal or a wrong length: an answer to this request.
		if len(b) < 22 || b[0] != 0x06 || b[3]&0x1f != 0x07 || b[4] != 0 || int(b[13]) > len(b)-14 {
			t.Fatalf("parseGUIDAnswer(% x) = %v: not a session-less IPMI datagram", b, err)
		}
		msg := b[14 : 14+int(b[13])]
		if checksum(msg[:2]) != msg[2] || checksum(msg[3:len(msg)-1]) != msg[len(msg)-1] ||
			msg[1]>>2 != 0x07 || msg[4]>>2 != 1 || msg[5] != 0x37 {
			t.Fatalf("parseGUIDAnswer(% x) = %v: not an answer to Get System GUID", b, err)
		}
		if err != nil {
			return
		}
		if msg[6] != 0 || len(msg) != 24 || !bytes.Equal(guid[:], msg[7:23]) {
			t.Fatalf("parseGUIDAnswer(% x) = %x: not the answer's 16 bytes", b, guid)
		}
		if g2, err := parseGUIDAnswer(append(slices.Clone(b), 0xff, 0x00)); err != nil || g2 != guid {
			t.Fatalf("parseGUIDAnswer(% x) with two bytes after the message = %x, %v", b, g2, err)
		}
	})
}
