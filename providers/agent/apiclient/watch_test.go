package apiclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"palisade.dev/palisade/providers/agent/apiclient"
	"palisade.dev/palisade/test/agentapi"
	"palisade.dev/palisade/test/testbed"
)

// pod is what the tests decode of a pod.
type pod struct {
	Metadata struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
}

// TestListAndWatch runs List and Watch against a real API server, with the token and rules an
// agent has: a list longer than a page comes whole, only the selected objects, with a
// resourceVersion from which a watch sees the next creation, change and deletion in order,
// each with its own resourceVersion; a watch from a resourceVersion the server no longer holds
// ends with a 410 Gone *Error.
func TestListAndWatch(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, CRDDirs: []string{}, Controllers: []string{"serviceaccount-token-controller"}})
	ctx := context.Background()
	args, err := agentapi.Args(ctx, c.Kube, c.Config.CAData, t.TempDir(), c.Config.Host, "")
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiclient.New(args[1], args[3], args[5]) // --api-server, --api-token-file, --api-ca-file
	if err != nil {
		t.Fatal(err)
	}
	pods := c.Kube.CoreV1().Pods("default")
	create := func(name, node string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 60 {
		create(fmt.Sprint("p-", i), "n1")
	}
	create("other", "n2")
	q := url.Values{"fieldSelector": {"spec.nodeName=n1"}}
	list, rv, err := apiclient.List[pod](ctx, api, "listing", "/api/v1/pods", q)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 60 || rv == "" || slices.ContainsFunc(list, func(p pod) bool { return p.Spec.NodeName != "n1" || p.Metadata.UID == "" }) {
		t.Fatalf("listed %d pods (resourceVersion %q), want the 60 of n1 with their UIDs", len(list), rv)
	}

	create("p-new", "n1")
	if _, err := pods.Patch(ctx, "p-new", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "p-new", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got []string
	last := rv
	errEnough := errors.New("enough")
	err = apiclient.Watch(wctx, api, "watching", "/api/v1/pods", url.Values{"fieldSelector": q["fieldSelector"], "resourceVersion": {rv}},
		func(ev apiclient.Event[pod]) error {
			got = append(got, ev.Type+" "+ev.Object.Metadata.Name)
			if ev.ResourceVersion == "" || ev.ResourceVersion == last {
				t.Errorf("event %s %s with resourceVersion %q after %q", ev.Type, ev.Object.Metadata.Name, ev.ResourceVersion, last)
			}
			last = ev.ResourceVersion
			if ev.Type == "DELETED" {
				return errEnough
			}
			return nil
		})
	// The deletion of a pod bound to a node first sets its deletionTimestamp (a change), even
	// with a grace period of 0.
	if !errors.Is(err, errEnough) || !slices.Equal(got, []string{"ADDED p-new", "MODIFIED p-new", "MODIFIED p-new", "DELETED p-new"}) {
		t.Errorf("watch: %v, events %q; want the creation, change and deletion of p-new", err, got)
	}
}

// TestWatchError: an ERROR event ends a watch with the *Error of its Status (the real API
// server sends 410 Gone only once etcd has compacted what the watch asks for: here, a stand-in
// server, for the decoding).
func TestWatchError(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"7"}}}` + "\n" +
			`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (7)","reason":"Expired","code":410}}` + "\n"))
	}))
	defer srv.Close()
	api := agentapi.StandIn(t, srv)
	var err error
	var got []string
	err = apiclient.Watch(context.Background(), api, "watching", "/api/v1/pods", nil, func(ev apiclient.Event[pod]) error {
		got = append(got, ev.Type+" "+ev.Object.Metadata.Name+" "+ev.ResourceVersion)
		return nil
	})
	var apiErr *apiclient.Error
	if !apiclient.IsStatus(err, http.StatusGone) || !errors.As(err, &apiErr) || apiErr.Reason != "Expired" || !slices.Equal(got, []string{"ADDED a 7"}) {
		t.Errorf("watch: %v after %q, want 410 Expired after ADDED a 7", err, got)
	}
}
