package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// probeAttempts is how many pings the probe sends, evenly spread over its timeout.
const probeAttempts = 3

// pingPacket is a session-less IPMI v1.5 "Get Channel Authentication Capabilities" request in
// an RMCP datagram (this channel, with IPMI v2 data; privilege administrator): the first
// message ipmitool sends, which a BMC answers without credentials.
var pingPacket = appRequest(0, 0x38, 0x8e, 0x04)

// appRequest is a session-less IPMI v1.5 request of netFn App to the BMC in an RMCP datagram,
// with its sequence number, command and data, and both checksums.
func appRequest(seq, cmd byte, data ...byte) []byte {
	header := []byte{0x20, 0x06 << 2}                    // responder: BMC; netFn App, LUN 0
	body := append([]byte{0x81, seq << 2, cmd}, data...) // requester: remote console; sequence, LUN 0
	msg := append(append(header, checksum(header)), append(body, checksum(body))...)
	return append([]byte{
		0x06, 0x00, 0xff, 0x07, // RMCP v1.0, reserved, no RMCP ack, class IPMI
		0x00, 0, 0, 0, 0, 0, 0, 0, 0, // auth type none, session sequence 0, session id 0
		byte(len(msg)),
	}, msg...)
}

// checksum is IPMI's two's complement checksum of the bytes.
func checksum(b []byte) byte {
	var sum byte
	for _, c := range b {
		sum += c
	}
	return -sum
}

// probe pings the BMC at addr until it answers with any IPMI datagram, for at most timeout.
// An error means nothing answered: the BMC is down, the address is wrong or the network drops
// the traffic.
func probe(ctx context.Context, addr string, timeout time.Duration) error {
	start := time.Now()
	answered, err := exchange(ctx, addr, pingPacket, timeout, isPong)
	if err != nil {
		return fmt.Errorf("pinging BMC: %w", err)
	}
	if !answered {
		return fmt.Errorf("no answer to IPMI ping from %s in %s", addr, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// exchange sends packet to addr probeAttempts times, evenly spread over timeout, until a
// datagram arrives that accept takes (true). It returns false when none did in time.
func exchange(ctx context.Context, addr string, packet []byte, timeout time.Duration, accept func([]byte) bool) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // unblock Read on cancel
	defer stop()

	buf := make([]byte, 512)
	interval := timeout / probeAttempts
	for attempt := 0; attempt < probeAttempts && ctx.Err() == nil; attempt++ {
		until := time.Now().Add(interval)
		_, _ = conn.Write(packet) // a refused write is an ICMP answer to an earlier one
		if answerBefore(ctx, conn, buf, until, accept) {
			return true, nil
		}
	}
	return false, nil
}

// answerBefore reads until a datagram that accept takes arrives (true) or until passes
// (false). ICMP "port unreachable" errors are not answers: a BMC that is starting up may not
// have bound its port.
func answerBefore(ctx context.Context, conn net.Conn, buf []byte, until time.Time, accept func([]byte) bool) bool {
	for ctx.Err() == nil && time.Now().Before(until) {
		_ = conn.SetReadDeadline(until)
		n, err := conn.Read(buf)
		if err == nil && accept(buf[:n]) {
			return true
		}
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			wait(ctx, min(time.Until(until), 100*time.Millisecond))
		}
	}
	return false
}

// isPong says whether b is an RMCP datagram of class IPMI.
func isPong(b []byte) bool {
	return len(b) >= 4 && b[0] == 0x06 && b[3]&0x1f == 0x07
}

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
