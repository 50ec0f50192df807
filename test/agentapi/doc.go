// Package agentapi gives test agents the API server as the chart gives it to the agents' pods:
// a ServiceAccount bound to the rules of the chart's agent ClusterRole, and the flags that hand
// its token, the API server's CA and address to palisade-agent (or to the agent's own API client
// in a package's test).
package agentapi
