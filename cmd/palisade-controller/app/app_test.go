package app

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// A negative fence concurrency is refused with an error naming the flag, before anything starts.
func TestNewManagerRefusesNegativeFenceConcurrency(t *testing.T) {
	_, err := NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, Options{FenceConcurrency: -1})
	if err == nil || !strings.Contains(err.Error(), "--fence-concurrency is -1") {
		t.Fatalf("NewManager with FenceConcurrency -1: %v, want an error naming --fence-concurrency", err)
	}
}

// A negative --attachment-force-after is refused, before anything starts: it would remove a
// VolumeAttachment's finalizer at the attacher's first detach error.
func TestNewManagerRefusesNegativeAttachmentForceAfter(t *testing.T) {
	_, err := NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, Options{AttachmentForceAge: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "--attachment-force-after is -1s") {
		t.Fatalf("NewManager with AttachmentForceAge -1s: %v, want an error naming --attachment-force-after", err)
	}
}
