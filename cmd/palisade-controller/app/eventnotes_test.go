package app

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"

	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/testbed"
)

// An Event whose note is longer than the API server takes (1024 bytes: a fence request's reason
// of 256 non-ASCII characters in a message, a provider's long error) still lands, cut on a UTF-8
// boundary, through the recorder the controller uses (fencing.BoundedNotes); a short note lands
// as it was written. Unbounded, the API server refuses the long one and it is lost.
func TestLongEventNotesLand(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true})
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	stop := make(chan struct{})
	defer close(stop)
	b.StartRecordingToSink(stop)
	rec := fencing.BoundedNotes(b.NewRecorder(scheme, "palisade-controller"))

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if err := c.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	reason := strings.Repeat("ж", 256) // 512 bytes, as RequestText accepts it
	rec.Eventf(node, nil, corev1.EventTypeWarning, "InvalidFenceRequest", "Fence", "node %s: request %q refused: %s; %s", node.Name, reason, strings.Repeat("why ", 100), reason)
	rec.Eventf(node, nil, corev1.EventTypeNormal, "Short", "Fence", "100%% of %s", node.Name)

	var long, short *eventsv1.Event
	deadline := time.Now().Add(20 * time.Second)
	for (long == nil || short == nil) && time.Now().Before(deadline) {
		list, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			switch e := &list.Items[i]; e.Reason {
			case "InvalidFenceRequest":
				long = e
			case "Short":
				short = e
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if long == nil || short == nil {
		t.Fatalf("events landed: long %v, short %v: want both", long != nil, short != nil)
	}
	if n := len(long.Note); n > 1024 || n < 1000 || !utf8.ValidString(long.Note) || !strings.HasPrefix(long.Note, "node n1: request \"жжж") || !strings.HasSuffix(long.Note, "…") {
		t.Errorf("long note (%d bytes) %q: want it cut to at most 1024 bytes of valid UTF-8, ending in …", n, long.Note)
	}
	if short.Note != "100% of n1" {
		t.Errorf("short note %q, want it as written", short.Note)
	}
}
