// Package attach breaks the RWO attachments of a node whose fence is confirmed: it deletes the
// node's VolumeAttachments so that the attach-detach controller can attach the volumes to the
// replacement pod's node without its 6-minute wait. An attachment held by the CSI
// external-attacher's finalizer is left to the attacher (it calls ControllerUnpublishVolume, which
// is safe now that the node is off). Only when the attacher's detach error has stood for
// ForceAfter, and the attachment has waited as long since its deletion, is the finalizer
// removed, as the attacher itself does once a volume is detached; an attacher that has not
// acted is waited for (removing its finalizer then would leave the volume published to the
// fenced node in the backend).
// Callers must only call Release for a node whose fence is confirmed (invariant 1).
package attach
