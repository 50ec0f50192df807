package ipmi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

// sessionRetransmit is bmclib's `ipmitool -N 5`: a session that fails because the BMC stopped
// answering takes at least one retransmit interval, so a faster failure was an answer.
const sessionRetransmit = 5 * time.Second

// ipmitool's texts, matched case-insensitively. The RMCP+ status texts follow ipmitool's
// "Error in open session response message : %s" and "RAKP 2 message indicates an error : %s".
var (
	// The BMC does not speak the cipher suite or IPMI version asked for: a setting to change.
	badTargetTexts = []string{
		"invalid authentication algorithm",
		"invalid integrity algorithm",
		"invalid confidentiality algorithm",
		"no matching authentication algorithm",
		"no matching integrity payload",
		"no matching cipher suite",
		"this bmc does not support ipmi v2 / rmcp+",
	}
	// The BMC answered but is busy: worth another try.
	busyTexts = []string{
		"insufficient resources for session",
		"insufficient resources for role",
	}
	// The BMC rejected the credentials or the user's privilege.
	authTexts = []string{
		"rakp 2 hmac is invalid",
		"unauthorized name",
		"invalid integrity check value",
		"unauthorized role requested",
		"invalid role",
		"invalid name length",
	}
	// What ipmitool prints, without -v, for both a rejected password and a BMC that stops
	// answering: told apart by how long it took.
	sessionText      = "unable to establish ipmi v2 / rmcp+ session"
	unreachableTexts = []string{"no response", "address lookup for", "unable to establish lan session"}
)

// classify turns a bmclib error into a Reason and an error text without the password. elapsed
// is how long the failed bmclib step took.
func classify(ctx context.Context, err error, elapsed time.Duration, password string) (providers.Reason, error) {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return providers.ReasonUnreachable, fmt.Errorf("no answer in time, the command may or may not have taken effect: %w", ctxErr)
	}
	msg := redact(power.FlattenBMCLib(err), password)
	if own := (*providers.Error)(nil); errors.As(err, &own) {
		return own.Reason, errors.New(msg) // said by this provider, not by ipmitool
	}
	return reasonFor(msg, elapsed), errors.New(msg)
}

func reasonFor(msg string, elapsed time.Duration) providers.Reason {
	lower := strings.ToLower(msg)
	switch {
	case containsAny(lower, badTargetTexts):
		return providers.ReasonBadTarget
	case containsAny(lower, busyTexts):
		return providers.ReasonRefused
	case containsAny(lower, authTexts):
		return providers.ReasonAuthFailed
	case strings.Contains(lower, sessionText) && elapsed < sessionRetransmit:
		return providers.ReasonAuthFailed
	case strings.Contains(lower, sessionText), containsAny(lower, unreachableTexts):
		return providers.ReasonUnreachable
	}
	return providers.ReasonRefused
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// redact removes the password from s.
func redact(s, password string) string {
	if password == "" {
		return s
	}
	return strings.ReplaceAll(s, password, "[redacted]")
}
