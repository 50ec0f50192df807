package agentwire

import (
	"bytes"
	"testing"
)

// FuzzHeartbeatDatagram: of all byte strings, only the exact bytes SealHeartbeat and
// SealAccepted make for a key open with it, and changing any one byte of them makes them fail.
func FuzzHeartbeatDatagram(f *testing.F) {
	id := bytes.Repeat([]byte{0xA5}, DatagramKeyIDBytes)
	key := bytes.Repeat([]byte{0x3C}, DatagramKeyBytes)
	hb, _ := SealHeartbeat(id, key, []byte(`{"node":"n1","seq":3}`))
	f.Add(hb, uint16(7))
	f.Add(SealAccepted(id, key, 3, DatagramExchange), uint16(30))
	f.Add(UnknownKey(id), uint16(0))
	f.Add([]byte("PHB1"), uint16(1))
	f.Fuzz(func(t *testing.T, b []byte, flip uint16) {
		if payload, err := OpenHeartbeat(b, key); err == nil {
			kid, _ := HeartbeatKeyID(b)
			if again, _ := SealHeartbeat(kid[:], key, payload); !bytes.Equal(again, b) {
				t.Fatalf("OpenHeartbeat accepted %x, which SealHeartbeat does not make", b)
			}
			mutated := bytes.Clone(b)
			mutated[int(flip)%len(b)] ^= 0x01
			if _, err := OpenHeartbeat(mutated, key); err == nil {
				t.Fatalf("OpenHeartbeat accepted %x with byte %d changed", b, int(flip)%len(b))
			}
		}
		if a, err := OpenAnswer(b, id, key); err == nil && !a.UnknownKey {
			if again := SealAccepted(id, key, a.Seq, a.Flags); !bytes.Equal(again, b) {
				t.Fatalf("OpenAnswer accepted %x, which SealAccepted does not make", b)
			}
		}
		if sealed, ok := SealHeartbeat(id, key, b); ok {
			if payload, err := OpenHeartbeat(sealed, key); err != nil || !bytes.Equal(payload, b) {
				t.Fatalf("a sealed payload did not open back: %v", err)
			}
		} else if len(b)+headerBytes+tagBytes <= MaxDatagramBytes {
			t.Fatalf("a payload of %d bytes did not fit", len(b))
		}
	})
}
