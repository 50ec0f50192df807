// Package gatewaywire is the protocol between the controller's StorageGateway method and a
// storage gateway (palisade-agent gateway, on a storage host): HTTPS with mutual TLS, JSON
// bodies. The controller drives, the gateway carries out and reads back, as with a BMC.
//
//	PUT    /v1/fences/{node}          FenceRequest → 200 Fence (read back from nftables)
//	GET    /v1/fences/{node}                       → 200 Fence (read back; Token 0 and no Rejected for a node never fenced)
//	DELETE /v1/fences/{node}?token=T               → 200 Fence (read back after the lift)
//
// A command whose token is older than one the gateway already took for the node is refused
// with 409 and an Error whose Reason is ReasonStaleToken; a malformed request with 400 and
// ReasonBadRequest; a failure to apply or read the ruleset with 500 and ReasonGatewayFailed.
// An unfence must carry a token newer than the fence's: a replayed fence is then refused.
package gatewaywire

// PathFences is the prefix of a node's fence: PathFences + node name.
const PathFences = "/v1/fences/"

// Error reasons.
const (
	ReasonStaleToken    = "StaleFencingToken"
	ReasonBadRequest    = "BadRequest"
	ReasonGatewayFailed = "GatewayFailed"
)

// FenceRequest asks the gateway to reject every packet from Addresses as the node's.
type FenceRequest struct {
	// Token is the fence's fencing token.
	Token int64 `json:"token"`
	// Addresses are IP addresses (no prefixes), at least one.
	Addresses []string `json:"addresses"`
}

// Fence is a node's fence as the gateway reads it back from its ruleset.
type Fence struct {
	// Gateway names the gateway that answers (its --name).
	Gateway string `json:"gateway"`
	Node    string `json:"node"`
	// Token is the highest token the gateway took for the node.
	Token int64 `json:"token"`
	// Fenced: the node's rules, for Token, reject every address it was fenced for.
	Fenced bool `json:"fenced"`
	// Rejected are the addresses the node's rules reject, as read back.
	Rejected []string `json:"rejected,omitempty"`
}

// Error is the body of every answer other than 200.
type Error struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}
