package ipmisim

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

func startBMC(t *testing.T, opts Options) *BMC {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return b
}

func ipmitool(t *testing.T, b *BMC, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := b.IPMITool(ctx, args...)
	if err != nil {
		t.Fatalf("ipmitool %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(out)
}

func wantPower(t *testing.T, b *BMC, want bool) {
	t.Helper()
	got, err := b.PoweredOn()
	if err != nil {
		t.Fatalf("PoweredOn: %v", err)
	}
	if got != want {
		t.Fatalf("PoweredOn() = %v, want %v", got, want)
	}
}

func wantOffCommands(t *testing.T, b *BMC, want int) {
	t.Helper()
	got, err := b.OffCommands()
	if err != nil {
		t.Fatalf("OffCommands: %v", err)
	}
	if got != want {
		t.Fatalf("OffCommands() = %d, want %d", got, want)
	}
}

func TestPowerRoundTrip(t *testing.T) {
	b := startBMC(t, Options{})
	if got, want := b.Username()+"/"+b.Password(), "admin/secret"; got != want {
		t.Errorf("credentials = %s, want %s", got, want)
	}
	if got, want := ipmitool(t, b, "chassis", "power", "status"), "Chassis Power is on"; got != want {
		t.Errorf("status = %q, want %q", got, want)
	}
	wantPower(t, b, true)
	wantOffCommands(t, b, 0)

	if got, want := ipmitool(t, b, "chassis", "power", "off"), "Chassis Power Control: Down/Off"; got != want {
		t.Errorf("off = %q, want %q", got, want)
	}
	wantPower(t, b, false)
	wantOffCommands(t, b, 1)
	if got, want := ipmitool(t, b, "chassis", "power", "status"), "Chassis Power is off"; got != want {
		t.Errorf("status after off = %q, want %q", got, want)
	}

	// The physical world: someone presses the power button.
	if err := b.SetPower(true); err != nil {
		t.Fatal(err)
	}
	wantPower(t, b, true)
	if got, want := ipmitool(t, b, "chassis", "power", "status"), "Chassis Power is on"; got != want {
		t.Errorf("status after SetPower(true) = %q, want %q", got, want)
	}
	wantOffCommands(t, b, 1)
}

func TestIgnoreOff(t *testing.T) {
	b := startBMC(t, Options{Username: "root", Password: "calvin"})
	if err := b.SetIgnoreOff(true); err != nil {
		t.Fatal(err)
	}
	if got, want := ipmitool(t, b, "chassis", "power", "off"), "Chassis Power Control: Down/Off"; got != want {
		t.Errorf("off = %q, want %q", got, want)
	}
	wantPower(t, b, true)
	wantOffCommands(t, b, 1)
	if got, want := ipmitool(t, b, "chassis", "power", "status"), "Chassis Power is on"; got != want {
		t.Errorf("status = %q, want %q", got, want)
	}

	if err := b.SetIgnoreOff(false); err != nil {
		t.Fatal(err)
	}
	ipmitool(t, b, "chassis", "power", "off")
	wantPower(t, b, false)
	wantOffCommands(t, b, 2)
}

// A slow BMC carries out and answers a chassis command only after its delay.
func TestDelay(t *testing.T) {
	b := startBMC(t, Options{})
	const delay = 1500 * time.Millisecond
	if err := b.SetDelay(delay); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if got, want := ipmitool(t, b, "chassis", "power", "off"), "Chassis Power Control: Down/Off"; got != want {
		t.Errorf("off = %q, want %q", got, want)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("power off answered after %s, want at least %s", took, delay)
	}
	wantPower(t, b, false)
	if err := b.SetDelay(0); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	ipmitool(t, b, "chassis", "power", "status")
	if took := time.Since(start); took >= delay {
		t.Errorf("power status answered after %s with the delay cleared", took)
	}
}

func TestWrongPasswordIsRefused(t *testing.T) {
	b := startBMC(t, Options{})
	liar := &BMC{dir: b.dir, port: b.port, username: b.username, password: "wrong"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := liar.IPMITool(ctx, "chassis", "power", "off")
	if err == nil {
		t.Fatalf("ipmitool with a wrong password succeeded: %s", out)
	}
	wantPower(t, b, true)
	wantOffCommands(t, b, 0)
}

// A BMC on another address of the machine than loopback answers there.
func TestHost(t *testing.T) {
	b := startBMC(t, Options{Host: "127.0.0.2"})
	if got, want := b.Address(), "127.0.0.2:"; !strings.HasPrefix(got, want) {
		t.Errorf("Address() = %s, want %s…", got, want)
	}
	if got, want := ipmitool(t, b, "chassis", "power", "status"), "Chassis Power is on"; got != want {
		t.Errorf("status = %q, want %q", got, want)
	}
}

func TestTwoBMCs(t *testing.T) {
	a := startBMC(t, Options{})
	b := startBMC(t, Options{})
	if a.Address() == b.Address() {
		t.Fatalf("both BMCs on %s", a.Address())
	}
	ipmitool(t, a, "chassis", "power", "off")
	wantPower(t, a, false)
	wantPower(t, b, true)
	wantOffCommands(t, b, 0)
	if got, want := ipmitool(t, b, "chassis", "power", "status"), "Chassis Power is on"; got != want {
		t.Errorf("other BMC status = %q, want %q", got, want)
	}
}

func TestFixedPortAndRestart(t *testing.T) {
	dir := t.TempDir()
	first := startBMC(t, Options{Dir: dir})
	ipmitool(t, first, "chassis", "power", "off")
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	// Same directory and port: the machine is still off.
	again := startBMC(t, Options{Dir: dir, Port: first.Port()})
	if got, want := ipmitool(t, again, "chassis", "power", "status"), "Chassis Power is off"; got != want {
		t.Errorf("status after restart = %q, want %q", got, want)
	}
}

func TestStopLeavesNoProcess(t *testing.T) {
	b := startBMC(t, Options{})
	pid := b.cmd.Process.Pid
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("ipmi_sim %d not running before Stop: %v", pid, err)
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process group %d after Stop: kill(0) = %v, want ESRCH", pid, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := b.IPMITool(ctx, "-N", "1", "-R", "1", "chassis", "power", "status"); err == nil {
		t.Errorf("BMC still answers after Stop: %s", out)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	for name, opts := range map[string]Options{
		"no dir":         {},
		"quote":          {Dir: t.TempDir(), Password: `se"cret`},
		"space in user":  {Dir: t.TempDir(), Username: "ad min"},
		"long password":  {Dir: t.TempDir(), Password: strings.Repeat("x", 21)},
		"space in a dir": {Dir: t.TempDir() + "/a b"},
		"host name":      {Dir: t.TempDir(), Host: "localhost"},
		"IPv6 host":      {Dir: t.TempDir(), Host: "::1"},
	} {
		t.Run(name, func(t *testing.T) {
			if b, err := Start(context.Background(), opts); err == nil {
				_ = b.Stop()
				t.Fatal("Start succeeded, want an error")
			}
		})
	}
}
