// Package apiclient is the node agent's minimal client of the Kubernetes API server: the few
// calls it makes (CertificateSigningRequests, the CA bundle's ConfigMap, its own NodeFence, the
// pods bound to its node) over net/http with small typed structs and the pod's ServiceAccount
// token, re-read for every request. List and Watch decode a collection's objects into the
// caller's own struct, which holds only the fields it reads. client-go would cost the agent more
// memory than everything else it does.
package apiclient
