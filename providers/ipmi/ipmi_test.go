package ipmi

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/test/testbed/ipmisim"
)

// Tests run against a real ipmi_sim through the real ipmitool.

func startBMC(t *testing.T) *ipmisim.BMC {
	t.Helper()
	return startBMCOf(t, ipmisim.Options{Password: "s3cr3t-pw"})
}

// startBMCOf starts an ipmi_sim of opts in a directory of the test's, stopped at its end.
func startBMCOf(t *testing.T, opts ipmisim.Options) *ipmisim.BMC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts.Dir = t.TempDir()
	b, err := ipmisim.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting ipmi_sim: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("stopping ipmi_sim: %v", err)
		}
	})
	return b
}

func targetOf(b *ipmisim.BMC) Target {
	return Target{Node: "node-1", Address: b.Address(), Username: b.Username(), Password: b.Password()}
}

func powerState(t *testing.T, p *Provider, target Target) PowerState {
	t.Helper()
	got, err := p.PowerState(context.Background(), target)
	if err != nil {
		t.Fatalf("PowerState: %v", err)
	}
	return got
}

func poweredOn(t *testing.T, b *ipmisim.BMC) bool {
	t.Helper()
	on, err := b.PoweredOn()
	if err != nil {
		t.Fatal(err)
	}
	return on
}

func offCommands(t *testing.T, b *ipmisim.BMC) int {
	t.Helper()
	n, err := b.OffCommands()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wantUntouched checks that another machine's BMC b got no power-off command and is still on.
func wantUntouched(t *testing.T, b *ipmisim.BMC) {
	t.Helper()
	if n := offCommands(t, b); n != 0 || !poweredOn(t, b) {
		t.Fatalf("%d power-off commands reached the other machine (on: %v)", n, poweredOn(t, b))
	}
}

func wantReason(t *testing.T, err error, want providers.Reason) {
	t.Helper()
	var perr *providers.Error
	if !errors.As(err, &perr) {
		t.Fatalf("error %v is not a *providers.Error", err)
	}
	if perr.Reason != want {
		t.Fatalf("reason = %s, want %s (error: %v)", perr.Reason, want, err)
	}
}

func TestPowerOffRoundTrip(t *testing.T) {
	b := startBMC(t)
	p := New(nil)
	target := targetOf(b)
	if got := powerState(t, p, target); got != PowerOn {
		t.Fatalf("PowerState before = %s, want On", got)
	}

	start := time.Now()
	if err := p.PowerOff(context.Background(), target); err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	offTook := time.Since(start)
	start = time.Now()
	got := powerState(t, p, target)
	t.Logf("PowerOff took %s, PowerState took %s", offTook, time.Since(start))
	if got != PowerOff {
		t.Errorf("PowerState after PowerOff = %s, want Off", got)
	}
	if poweredOn(t, b) {
		t.Error("the machine is still powered on")
	}
	if n := offCommands(t, b); n != 1 {
		t.Errorf("off commands = %d, want 1", n)
	}

	if err := p.PowerOn(context.Background(), target); err != nil {
		t.Fatalf("PowerOn: %v", err)
	}
	if got := powerState(t, p, target); got != PowerOn || !poweredOn(t, b) {
		t.Errorf("after PowerOn: PowerState = %s, powered on = %v; want On, true", got, poweredOn(t, b))
	}
}

func TestPowerOffIsIdempotent(t *testing.T) {
	b := startBMC(t)
	if err := b.SetPower(false); err != nil { // the plug was pulled already
		t.Fatal(err)
	}
	p := New(nil)
	for i := 0; i < 2; i++ {
		if err := p.PowerOff(context.Background(), targetOf(b)); err != nil {
			t.Fatalf("PowerOff #%d of a machine that is off: %v", i+1, err)
		}
	}
	if got := powerState(t, p, targetOf(b)); got != PowerOff {
		t.Errorf("PowerState = %s, want Off", got)
	}
	if poweredOn(t, b) {
		t.Error("the machine is powered on")
	}
}

func TestLyingBMC(t *testing.T) {
	b := startBMC(t)
	if err := b.SetIgnoreOff(true); err != nil {
		t.Fatal(err)
	}
	p := New(nil)
	if err := p.PowerOff(context.Background(), targetOf(b)); err != nil {
		t.Fatalf("PowerOff: %v (a lying BMC accepts the command)", err)
	}
	if got := powerState(t, p, targetOf(b)); got != PowerOn {
		t.Errorf("PowerState = %s, want On: the BMC ignored the command", got)
	}
	if n := offCommands(t, b); n != 1 {
		t.Errorf("off commands = %d, want 1", n)
	}
}

// logSink collects everything logged at any verbosity.
type logSink struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (s *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 10})
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func TestWrongCredentials(t *testing.T) {
	b := startBMC(t)
	tests := []struct {
		name     string
		username string
		password string
	}{
		{name: "wrong password", username: b.Username(), password: "hunter2-wrong"},
		{name: "unknown user", username: "nobody", password: b.Password()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs logSink
			p := New(nil, WithLogger(logs.logger()))
			target := targetOf(b)
			target.Username, target.Password = tt.username, tt.password

			start := time.Now()
			err := p.PowerOff(context.Background(), target)
			took := time.Since(start)
			t.Logf("PowerOff with %s failed after %s: %v", tt.name, took, err)
			wantReason(t, err, providers.ReasonAuthFailed)
			if took >= sessionRetransmit {
				t.Errorf("auth failure took %s, want under ipmitool's retransmit interval %s", took, sessionRetransmit)
			}
			_, err2 := p.PowerState(context.Background(), target)
			wantReason(t, err2, providers.ReasonAuthFailed)
			if n := offCommands(t, b); n != 0 {
				t.Errorf("off commands = %d, want 0", n)
			}
			if !poweredOn(t, b) {
				t.Error("the machine was powered off with wrong credentials")
			}
			for _, text := range []string{err.Error(), err2.Error(), logs.String()} {
				if strings.Contains(text, tt.password) || strings.Contains(text, b.Password()) {
					t.Errorf("a password appears in %q", text)
				}
			}
			if !strings.Contains(logs.String(), "IPMI call failed") {
				t.Errorf("nothing logged at verbosity 10: %q", logs.String())
			}
		})
	}
}

func TestCipherSuiteTheBMCDoesNotSpeak(t *testing.T) {
	b := startBMC(t)
	target := targetOf(b)
	target.CipherSuite = "17"
	err := New(nil).PowerOff(context.Background(), target)
	wantReason(t, err, providers.ReasonBadTarget)
	if !strings.Contains(err.Error(), "invalid authentication algorithm") {
		t.Errorf("error %q does not say why", err)
	}
	if n := offCommands(t, b); n != 0 {
		t.Errorf("off commands = %d, want 0", n)
	}
}

// freePort is a UDP port on 127.0.0.1 where nothing listens.
func freePort(t *testing.T) string {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.LocalAddr().String()
}

func TestUnreachable(t *testing.T) {
	p := New(nil)
	target := Target{Node: "node-1", Address: freePort(t), Username: "admin", Password: "s3cr3t-pw"}
	for _, call := range []struct {
		name string
		fn   func() error
	}{
		{"PowerOff", func() error { return p.PowerOff(context.Background(), target) }},
		{"PowerState", func() error { _, err := p.PowerState(context.Background(), target); return err }},
	} {
		start := time.Now()
		err := call.fn()
		took := time.Since(start)
		t.Logf("%s of an unreachable BMC failed after %s: %v", call.name, took, err)
		wantReason(t, err, providers.ReasonUnreachable)
		if took > DefaultProbeTimeout+time.Second || took > DefaultTimeout {
			t.Errorf("%s took %s, want about the probe timeout %s", call.name, took, DefaultProbeTimeout)
		}
		if strings.Contains(err.Error(), target.Password) {
			t.Errorf("the password appears in %q", err)
		}
	}
}

// fakeBMC is a stand-in for a BMC that misbehaves in ways ipmi_sim cannot be made to (goes
// silent in the middle of a call, keeps quiet on or refuses Get System GUID outside a session;
// no such BMC runs here). It answers each datagram with what answer returns (nothing for nil).
func fakeBMC(t *testing.T, answer func([]byte) []byte) string {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if a := answer(buf[:n]); a != nil {
				_, _ = conn.WriteTo(a, from)
			}
		}
	}()
	return conn.LocalAddr().String()
}

// silentBMC answers the first datagram (the ping) and then nothing: a BMC that goes away in
// the middle of a call.
func silentBMC(t *testing.T) string {
	var answered atomic.Bool
	return fakeBMC(t, func(b []byte) []byte {
		if len(b) >= 4 && !answered.Swap(true) {
			return []byte{0x06, 0x00, 0xff, 0x07}
		}
		return nil
	})
}

func TestBMCStopsAnsweringWithinTheCallTimeout(t *testing.T) {
	const timeout = 3 * time.Second
	p := New(nil, WithTimeout(timeout))
	target := Target{Node: "node-1", Address: silentBMC(t), Username: "admin", Password: "s3cr3t-pw"}
	start := time.Now()
	err := p.PowerOff(context.Background(), target)
	took := time.Since(start)
	t.Logf("PowerOff of a BMC that went silent failed after %s: %v", took, err)
	wantReason(t, err, providers.ReasonUnreachable)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
	if took > timeout+time.Second {
		t.Errorf("took %s, want about the call timeout %s", took, timeout)
	}
}

func TestBadTarget(t *testing.T) {
	good := Target{Node: "node-1", Address: "127.0.0.1:623", Username: "admin", Password: "s3cr3t-pw"}
	tests := []struct {
		name   string
		change func(*Target)
	}{
		{"empty address", func(t *Target) { t.Address = "" }},
		{"blank address", func(t *Target) { t.Address = "  " }},
		{"port out of range", func(t *Target) { t.Address = "10.0.0.1:70000" }},
		{"port not a number", func(t *Target) { t.Address = "10.0.0.1:ipmi" }},
		{"host like a flag", func(t *Target) { t.Address = "-oProxyCommand=x" }},
		{"no username", func(t *Target) { t.Username = "" }},
		{"no password", func(t *Target) { t.Password = "" }},
		{"no credentials", func(t *Target) { t.Username, t.Password = "", "" }},
		{"cipher suite not a number", func(t *Target) { t.CipherSuite = "three" }},
	}
	p := New(nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := good
			tt.change(&target)
			err := p.PowerOff(context.Background(), target)
			wantReason(t, err, providers.ReasonBadTarget)
			if strings.Contains(err.Error(), "s3cr3t-pw") {
				t.Errorf("the password appears in %q", err)
			}
		})
	}
}

func TestMissingIpmitool(t *testing.T) {
	p := New(nil, WithIpmitoolPath("/nonexistent/ipmitool"))
	err := p.PowerOff(context.Background(), Target{Node: "n", Address: "127.0.0.1", Username: "u", Password: "p"})
	wantReason(t, err, providers.ReasonBadTarget)
	if !strings.Contains(err.Error(), "ipmitool") {
		t.Errorf("error %q does not name ipmitool", err)
	}
	if got := p.Name(); got != "ipmi" {
		t.Errorf("Name() = %q, want ipmi", got)
	}
}

// A BMC whose power status says neither on nor off: bmclib sends "chassis power off" only to a
// chassis it reads on, so PowerOff used to return "accepted" with nothing sent. It fails with
// PowerStateUnknown, quoting the BMC, and sends nothing; the machine runs on.
func TestPowerStatusNeitherOnNorOff(t *testing.T) {
	b := startBMC(t)
	real, err := exec.LookPath("ipmitool")
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "ipmitool")
	script := "#!/bin/sh\ncase \"$*\" in *'chassis power status'*) echo 'Chassis Power is in a state'; exit 0;; esac\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// The fence's read-back says the same: not "still on", but an answer it cannot read.
	c, _, req := fenceScene(t, b, "")
	p := New(c, WithIpmitoolPath(wrapper))
	target, err := p.FenceTarget(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	req.Fence.Status.Steps = []v1alpha1.Step{{Name: v1alpha1.StepPowerOff, Method: "ipmi", State: v1alpha1.StepSucceeded, Target: target},
		{Name: v1alpha1.StepConfirmOff, Method: "ipmi", State: v1alpha1.StepStarted}}
	for _, expired := range []bool{false, true} {
		req.Expired = expired
		st, err := p.Check(context.Background(), req)
		if err != nil || st.State == providers.Confirmed || st.Reason != providers.ReasonPowerStateUnknown {
			t.Errorf("Check (expired %v) = %+v, %v; want %s, not confirmed", expired, st, err, providers.ReasonPowerStateUnknown)
		}
	}
	err = New(nil, WithIpmitoolPath(wrapper)).PowerOff(context.Background(), targetOf(b))
	wantReason(t, err, providers.ReasonPowerStateUnknown)
	if err != nil && !strings.Contains(err.Error(), "Chassis Power is in a state") {
		t.Errorf("error %q does not quote the BMC's answer", err)
	}
	if n := offCommands(t, b); n != 0 {
		t.Errorf("off commands = %d, want 0", n)
	}
	if !poweredOn(t, b) {
		t.Error("the machine is off")
	}
}
