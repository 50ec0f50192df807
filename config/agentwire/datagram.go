package agentwire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"sync"
)

// Heartbeat datagrams. An agent that holds a DatagramKey sends each heartbeat as one UDP
// datagram to the port number of the controller's HTTPS heartbeat server, instead of a request
// over a kept-open TLS connection: the controller then holds no connection, buffers and
// goroutine per agent, which at thousands of nodes were most of its memory. The HTTPS channel
// stays for what must not be lost or forged in the other direction: the key itself, commands,
// peer assignments and intervals, and as the fallback whenever datagrams go unanswered.
//
// A heartbeat datagram is
//
//	"PHB1" | key ID (16 bytes) | the Report as JSON | HMAC-SHA256(key, everything before)
//
// and the controller answers every one it accepted with
//
//	"PHA1" | key ID | the Report's Seq (8 bytes, big-endian) | flags (1 byte) | HMAC-SHA256(key, everything before)
//
// where flag DatagramExchange says the heartbeat was not recorded, and asks the agent to post it
// over HTTPS at once: the controller has news for it (a command, new peers, a new interval). A datagram naming a key the controller does
// not know (a new leader, an expired certificate) is answered "PHU1" | key ID, unauthenticated:
// the agent's answer to it is an HTTPS exchange, which is what a forged one can cause, no more.
// Replays are refused: the controller accepts a key's datagrams only with a Seq above the last
// one it accepted with that key, and a key is never given twice.
const (
	// DatagramKeyIDBytes and DatagramKeyBytes are the sizes of a key's ID and secret.
	DatagramKeyIDBytes = 16
	DatagramKeyBytes   = 32
	// MaxDatagramBytes bounds a heartbeat datagram: under an Ethernet MTU with IPv6 and UDP
	// headers, so that it is never fragmented. A Report that does not fit goes over HTTPS.
	MaxDatagramBytes = 1400
	// DatagramExchange is the answer's flag asking for an HTTPS exchange.
	DatagramExchange byte = 1
)

var (
	magicHeartbeat  = [4]byte{'P', 'H', 'B', '1'}
	magicAccepted   = [4]byte{'P', 'H', 'A', '1'}
	magicUnknownKey = [4]byte{'P', 'H', 'U', '1'}
)

const (
	headerBytes = 4 + DatagramKeyIDBytes
	tagBytes    = sha256.Size
	// acceptedBytes is the size of an answer that accepted a heartbeat.
	acceptedBytes = headerBytes + 8 + 1 + tagBytes
)

// ErrDatagram is wrapped by every error about a malformed datagram.
var ErrDatagram = errors.New("malformed heartbeat datagram")

// SealHeartbeat frames payload (a Report's JSON) for the key id/key; false when it does not fit
// MaxDatagramBytes.
func SealHeartbeat(id, key, payload []byte) ([]byte, bool) {
	n := headerBytes + len(payload) + tagBytes
	if n > MaxDatagramBytes || len(id) != DatagramKeyIDBytes {
		return nil, false
	}
	b := make([]byte, 0, n)
	b = append(b, magicHeartbeat[:]...)
	b = append(b, id...)
	b = append(b, payload...)
	return NewDatagramMAC(key).appendTag(b, b), true
}

// HeartbeatKeyID reads the key ID of a heartbeat datagram, before its key is known.
func HeartbeatKeyID(b []byte) ([DatagramKeyIDBytes]byte, error) {
	var id [DatagramKeyIDBytes]byte
	if len(b) < headerBytes+tagBytes || len(b) > MaxDatagramBytes || [4]byte(b[:4]) != magicHeartbeat {
		return id, ErrDatagram
	}
	copy(id[:], b[4:headerBytes])
	return id, nil
}

// OpenHeartbeat checks a heartbeat datagram's tag with key and returns its payload.
func OpenHeartbeat(b, key []byte) ([]byte, error) {
	return NewDatagramMAC(key).OpenHeartbeat(b)
}

// SealAccepted is the controller's authenticated answer to the heartbeat with seq.
func SealAccepted(id, key []byte, seq uint64, flags byte) []byte {
	return NewDatagramMAC(key).SealAccepted(id, seq, flags)
}

// DatagramMAC is one key's HMAC-SHA256, keyed once and reused: the controller authenticates
// every datagram of a key with it instead of hashing the key into a new HMAC twice per
// heartbeat. It is safe for concurrent use.
type DatagramMAC struct {
	mu  sync.Mutex
	h   hash.Hash
	sum [tagBytes]byte
}

// NewDatagramMAC keys a DatagramMAC with key.
func NewDatagramMAC(key []byte) *DatagramMAC {
	return &DatagramMAC{h: hmac.New(sha256.New, key)}
}

// appendTag appends b's tag to dst.
func (m *DatagramMAC) appendTag(dst, b []byte) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.h.Reset()
	m.h.Write(b)
	return m.h.Sum(dst)
}

// valid says whether t is body's tag.
func (m *DatagramMAC) valid(body, t []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.h.Reset()
	m.h.Write(body)
	return hmac.Equal(m.h.Sum(m.sum[:0]), t)
}

// OpenHeartbeat checks a heartbeat datagram's tag and returns its payload.
func (m *DatagramMAC) OpenHeartbeat(b []byte) ([]byte, error) {
	if _, err := HeartbeatKeyID(b); err != nil {
		return nil, err
	}
	body := b[:len(b)-tagBytes]
	if !m.valid(body, b[len(body):]) {
		return nil, errors.Join(ErrDatagram, errors.New("authentication failed"))
	}
	return body[headerBytes:], nil
}

// SealAccepted is the controller's authenticated answer to the heartbeat with seq, under key ID id.
func (m *DatagramMAC) SealAccepted(id []byte, seq uint64, flags byte) []byte {
	b := make([]byte, 0, acceptedBytes)
	b = append(b, magicAccepted[:]...)
	b = append(b, id...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = append(b, flags)
	return m.appendTag(b, b)
}

// UnknownKey is the controller's answer to a heartbeat naming a key it does not hold.
func UnknownKey(id []byte) []byte {
	return append(append(make([]byte, 0, headerBytes), magicUnknownKey[:]...), id...)
}

// Answer is what an agent read from an answer to its heartbeat datagram.
type Answer struct {
	// UnknownKey: the controller does not hold the key (unauthenticated).
	UnknownKey bool
	// Seq and Flags of an accepted heartbeat (authenticated).
	Seq   uint64
	Flags byte
}

// OpenAnswer reads an answer for the key id/key: an accepted one only with a valid tag.
func OpenAnswer(b, id, key []byte) (Answer, error) {
	switch {
	case len(b) == headerBytes && [4]byte(b[:4]) == magicUnknownKey && hmac.Equal(b[4:], id):
		return Answer{UnknownKey: true}, nil
	case len(b) != acceptedBytes || [4]byte(b[:4]) != magicAccepted || !hmac.Equal(b[4:headerBytes], id):
		return Answer{}, ErrDatagram
	}
	body := b[:len(b)-tagBytes]
	if !NewDatagramMAC(key).valid(body, b[len(body):]) {
		return Answer{}, errors.Join(ErrDatagram, errors.New("authentication failed"))
	}
	return Answer{Seq: binary.BigEndian.Uint64(body[headerBytes:]), Flags: body[headerBytes+8]}, nil
}
