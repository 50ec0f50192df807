// Package csidriver is a CSI controller plugin for the test bed: a stand-in for a storage
// backend, since no real one runs here. The CSI external-attacher in front of it is the real
// one (built by `make testbed`), so VolumeAttachments go through the same attach and detach
// path as in a cluster. The plugin serves the Identity and Controller services over a unix
// socket and behaves like a cloud disk: ControllerPublishVolume records which node a volume is
// published to and refuses (FailedPrecondition) to publish a single-node volume to a second
// node while it is published to another; ControllerUnpublishVolume is idempotent, and fails
// (Unavailable) as many times as a test asks with FailUnpublish, or (FailedPrecondition) while
// a test's SetUnpublishCheck says the backend still holds the volume (a cloud's detach that
// waits for its API, as the EBS CSI driver's waits for EC2).
package csidriver
