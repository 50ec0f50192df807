package agentwire

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// TestDatagramMACReused: one DatagramMAC, reused for many datagrams and by several goroutines
// at once (the controller's datagram readers), opens and seals exactly as a MAC keyed anew for
// each does, and still refuses a datagram sealed under another key.
func TestDatagramMACReused(t *testing.T) {
	id := bytes.Repeat([]byte{7}, DatagramKeyIDBytes)
	key, other := bytes.Repeat([]byte{1}, DatagramKeyBytes), bytes.Repeat([]byte{2}, DatagramKeyBytes)
	mac := NewDatagramMAC(key)
	var wg sync.WaitGroup
	errs := make(chan error, 4*200)
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				payload := fmt.Appendf(nil, `{"node":"n%d","seq":%d}`, g, i)
				d, _ := SealHeartbeat(id, key, payload)
				if got, err := mac.OpenHeartbeat(d); err != nil || !bytes.Equal(got, payload) {
					errs <- fmt.Errorf("goroutine %d, datagram %d: opened %q, %v; want %q", g, i, got, err, payload)
				}
				forged, _ := SealHeartbeat(id, other, payload)
				if _, err := mac.OpenHeartbeat(forged); err == nil {
					errs <- fmt.Errorf("goroutine %d, datagram %d: opened one sealed under another key", g, i)
				}
				if a, b := mac.SealAccepted(id, uint64(i), byte(g)), SealAccepted(id, key, uint64(i), byte(g)); !bytes.Equal(a, b) {
					errs <- fmt.Errorf("goroutine %d, answer %d: sealed %x, a fresh MAC seals %x", g, i, a, b)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
