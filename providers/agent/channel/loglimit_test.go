package channel

import (
	stdlog "log"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// lineCounts counts the lines of msg in logs, and the lines their reports say were held back.
func lineCounts(logs *logLines, msg string) (written, held int) {
	heldBack := regexp.MustCompile(`"heldBack"=(\d+)`)
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, l := range logs.lines {
		switch {
		case strings.Contains(l, `"msg"="`+msg+`"`):
			written++
		case strings.Contains(l, `"msg"="`+msg+` (more lines held back)"`):
			m := heldBack.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[1])
			held += n
		}
	}
	return written, held
}

// TestLineLimit: a burst of one message writes linesPerSecond lines, then one line saying how many
// were held back once the second is over; another message is not held back by the first, and
// the next second writes again.
func TestLineLimit(t *testing.T) {
	logs := &logLines{}
	l := newLineLimit(logs.logger(), linesPerSecond)
	clock := time.Now()
	l.now = func() time.Time { return clock } // the burst within one second, however slow the machine
	var due []func()
	l.after = func(_ time.Duration, f func()) { due = append(due, f) }
	for i := range 1000 {
		l.Info("burst", "i", i)
	}
	for i := range 5 {
		l.Info("other", "i", i)
	}
	if w, h := lineCounts(logs, "burst"); w != linesPerSecond || h != 0 {
		t.Errorf("during the burst's second: %d lines written, %d reported held back; want %d and none yet", w, h, linesPerSecond)
	}
	if w, _ := lineCounts(logs, "other"); w != 5 {
		t.Errorf("another message: %d of 5 lines written", w)
	}
	if len(due) != 1 {
		t.Fatalf("%d reports due, want the burst's one", len(due))
	}
	due[0]() // the second is over
	logs.waitFor(t, `"msg"="burst (more lines held back)"`, `"heldBack"=980`, `"written"=20`)
	clock = clock.Add(time.Second)
	l.Info("burst", "i", "after")
	if w, _ := lineCounts(logs, "burst"); w != linesPerSecond+1 {
		t.Errorf("a line after the second: %d lines written, want %d", w, linesPerSecond+1)
	}
	if _, h := lineCounts(logs, "other"); h != 0 {
		t.Errorf("another message under the limit: %d lines reported held back", h)
	}
}

// TestHandshakeErrorsLimited: a storm of failed TLS handshakes (each a line from the
// http.Server's error log) writes at most linesPerSecond of them a second, and every one is
// accounted for: written, or counted in a held-back line.
func TestHandshakeErrorsLimited(t *testing.T) {
	p := newPKI(t)
	logs := &logLines{}
	s := startServer(t, p, ServerOptions{Logger: logs.logger(), NoDatagrams: true})
	const n = 100
	for range n {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write([]byte("GET / HTTP/1.0\r\n\r\n")) // not a ClientHello: the handshake fails
		conn.Close()
	}
	var written, held int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if written, held = lineCounts(logs, "heartbeat server"); written+held == n {
			break
		}
	}
	if written+held != n {
		t.Fatalf("%d failed handshakes: %d lines written and %d reported held back", n, written, held)
	}
	if written >= n {
		t.Errorf("all %d handshake errors written one by one, none held back", n)
	}
}

// TestServerErrorsNotAllLimited: of the http.Server's own error lines, only the failed TLS
// handshakes go through the line limit; any other (a handler's panic, an accept error) is
// written every time.
func TestServerErrorsNotAllLimited(t *testing.T) {
	logs := &logLines{}
	w := stdlog.New(logWriter{log: logs.logger(), noisy: newLineLimit(logs.logger(), linesPerSecond)}, "", 0)
	for range 2 * linesPerSecond {
		w.Printf("http: TLS handshake error from 127.0.0.1:1: EOF")
		w.Printf("http: panic serving 127.0.0.1:1: boom")
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var handshakes, panics int
	for _, l := range logs.lines {
		handshakes += strings.Count(l, "TLS handshake error")
		panics += strings.Count(l, "panic serving")
	}
	if handshakes != linesPerSecond || panics != 2*linesPerSecond {
		t.Errorf("%d handshake errors and %d panics written of %d each; want %d and all", handshakes, panics, 2*linesPerSecond, linesPerSecond)
	}
}
