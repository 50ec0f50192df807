package ipmi

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

func TestReasonFor(t *testing.T) {
	const fast, slow = 40 * time.Millisecond, 6 * time.Second
	tests := []struct {
		name    string
		msg     string
		elapsed time.Duration
		want    providers.Reason
	}{
		{"rejected session, fast", "provider: ipmitool: Error: Unable to establish IPMI v2 / RMCP+ session: exit status 1", fast, providers.ReasonAuthFailed},
		{"session timed out, slow", "provider: ipmitool: Error: Unable to establish IPMI v2 / RMCP+ session: exit status 1", slow, providers.ReasonUnreachable},
		{"verbose HMAC", "> RAKP 2 HMAC is invalid\nError: Unable to establish IPMI v2 / RMCP+ session", slow, providers.ReasonAuthFailed},
		{"unknown user", "RAKP 2 message indicates an error : unauthorized name", fast, providers.ReasonAuthFailed},
		{"no admin privilege", "Error in open session response message : unauthorized role requested", fast, providers.ReasonAuthFailed},
		{"cipher suite", "Error in open session response message : invalid authentication algorithm Error: Unable to establish IPMI v2 / RMCP+ session", fast, providers.ReasonBadTarget},
		{"no IPMI v2", "This BMC does not support IPMI v2 / RMCP+", fast, providers.ReasonBadTarget},
		{"busy", "Error in open session response message : insufficient resources for session Error: Unable to establish IPMI v2 / RMCP+ session", fast, providers.ReasonRefused},
		{"no response", "No response from remote controller", slow, providers.ReasonUnreachable},
		{"bad host name", "Address lookup for bmc.invalid failed", fast, providers.ReasonUnreachable},
		{"command failed", "Unable to set Chassis Power Control to Down/Off", fast, providers.ReasonRefused},
		{"bmclib refusal", "provider: ipmitool, failed to set power state", fast, providers.ReasonRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reasonFor(tt.msg, tt.elapsed); got != tt.want {
				t.Errorf("reasonFor(%q, %s) = %s, want %s", tt.msg, tt.elapsed, got, tt.want)
			}
		})
	}
}

// multi behaves like bmclib's hashicorp multierror.
type multi []error

func (m multi) Error() string          { return fmt.Sprintf("%d errors occurred:\n\t* ...", len(m)) }
func (m multi) WrappedErrors() []error { return m }

func TestClassifyScrubsAndFlattens(t *testing.T) {
	err := multi{
		errors.New("provider: ipmitool: Error: Unable to establish IPMI v2 / RMCP+ session:\n exit status 1 (password hunter2)"),
		errors.New("provider: ipmitool: Error: Unable to establish IPMI v2 / RMCP+ session:\n exit status 1 (password hunter2)"),
		errors.New("no Opener implementations found"),
	}
	reason, got := classify(context.Background(), err, time.Millisecond, "hunter2")
	want := "provider: ipmitool: Error: Unable to establish IPMI v2 / RMCP+ session: exit status 1 (password [redacted])"
	if diff := cmp.Diff(want, got.Error()); diff != "" {
		t.Errorf("classify error text (-want +got):\n%s", diff)
	}
	if reason != providers.ReasonAuthFailed {
		t.Errorf("reason = %s, want %s", reason, providers.ReasonAuthFailed)
	}
}

func TestFlattenKeepsALoneSummary(t *testing.T) {
	err := multi{errors.New("provider: ipmitool, failed to set power state"), errors.New("failed to set power state")}
	want := "provider: ipmitool, failed to set power state"
	if diff := cmp.Diff(want, power.FlattenBMCLib(err)); diff != "" {
		t.Errorf("flatten (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("failed to get power state", power.FlattenBMCLib(multi{errors.New("failed to get power state")})); diff != "" {
		t.Errorf("flatten of a lone summary (-want +got):\n%s", diff)
	}
}

func TestClassifyDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	reason, err := classify(ctx, errors.New("signal: killed"), 15*time.Second, "pw")
	if reason != providers.ReasonUnreachable || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("classify after the deadline = %s, %v; want %s wrapping context.DeadlineExceeded", reason, err, providers.ReasonUnreachable)
	}
}

// TestParsePowerState pins the strict reading of ipmitool's output: one plain status line
// decides, noise around it is tolerated, anything contradictory or unclear is Unknown.
func TestParsePowerState(t *testing.T) {
	tests := map[string]PowerState{
		"Chassis Power is on\n":       PowerOn,
		"Chassis Power is off\n":      PowerOff,
		"  chassis power is OFF \r\n": PowerOff,
		"Get HPM.x Capabilities request failed, compcode = c9\nChassis Power is off\n": PowerOff,
		"Chassis Power is on\nwarning: session closed, power state may read off":       PowerOn,
		"Chassis Power is on\nChassis Power is off\n":                                  PowerUnknown,
		"Chassis Power is off\nChassis Power is off\n":                                 PowerUnknown,
		"Chassis Power is off\nChassis Power is unknown":                               PowerUnknown,
		"Chassis Power is off, probably":                                               PowerUnknown,
		"on":                                                                           PowerUnknown,
		"Off":                                                                          PowerUnknown,
		"on off":                                                                       PowerUnknown,
		"":                                                                             PowerUnknown,
		"Chassis Power is unknown":                                                     PowerUnknown,
		"poweringoff":                                                                  PowerUnknown,
	}
	for in, want := range tests {
		if got := parsePowerState(in); got != want {
			t.Errorf("parsePowerState(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSplitAddress(t *testing.T) {
	type hostPort struct{ Host, Port string }
	tests := []struct {
		in      string
		want    hostPort
		wantErr bool
	}{
		{in: "10.0.0.5", want: hostPort{"10.0.0.5", "623"}},
		{in: "10.0.0.5:6230", want: hostPort{"10.0.0.5", "6230"}},
		{in: "bmc-1.example.com", want: hostPort{"bmc-1.example.com", "623"}},
		{in: "[fd00::5]:623", want: hostPort{"fd00::5", "623"}},
		{in: "fd00::5", want: hostPort{"fd00::5", "623"}},
		{in: "[fd00::5]", want: hostPort{"fd00::5", "623"}},
		{in: " 10.0.0.5 ", want: hostPort{"10.0.0.5", "623"}},
		{in: "", wantErr: true},
		{in: "10.0.0.5:0", wantErr: true},
		{in: "10.0.0.5:", wantErr: true},
		{in: ":623", wantErr: true},
		{in: "fd00::zz", wantErr: true},
		{in: "user@host", wantErr: true},
		{in: "00]0", wantErr: true},      // found by FuzzSplitAddress: a bracket left in the host
		{in: "[a:b]:623", wantErr: true}, // a colon in a host that is no IPv6 address
		// IPv4 in inet_aton's other forms, which resolvers read differently: refused.
		{in: "10.1", wantErr: true},
		{in: "010.0.0.5:623", wantErr: true},
		{in: "0x0a.0.0.5", wantErr: true},
		{in: "167772165", wantErr: true},
		{in: "10.0.0.5.6", wantErr: true},
		{in: "1e100.example", want: hostPort{"1e100.example", "623"}},
		{in: "0xbmc.example:6230", want: hostPort{"0xbmc.example", "6230"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			host, port, err := splitAddress(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("splitAddress(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, hostPort{host, port}); diff != "" {
				t.Errorf("splitAddress(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}
