package podspecs

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/providers/agent/apiclient"
	"palisade.dev/palisade/providers/executor/protocol"
)

const (
	// podsPath is the API's collection of pods, in every namespace.
	podsPath = "/api/v1/pods"
	// watchSeconds is how long one watch runs before the server ends it and the Keeper
	// watches again from where it was.
	watchSeconds = "300"
	// maxRetry bounds the back-off between failed lists and watches.
	maxRetry = 30 * time.Second
)

// Config says whose pods to keep and where.
type Config struct {
	// Node is the node whose pods (by spec.nodeName) are kept.
	Node string
	// StateDir holds File; "" keeps the specs in memory only.
	StateDir string
	// Retry is the first wait after a failed list or watch; it doubles up to 30 s.
	Retry time.Duration
}

// Keeper keeps the specs of the pods bound to one node, as the API server last sent them.
type Keeper struct {
	api   *apiclient.Client
	node  string
	path  string // "" keeps them in memory only
	retry time.Duration
	log   logr.Logger

	mu    sync.Mutex
	pods  map[string]protocol.Pod // by UID
	state string                  // following, or failing since the last failure; "" before either
}

// New returns a Keeper of cfg.Node's pods through api, holding what File in cfg.StateDir
// kept until its first list succeeds.
func New(api *apiclient.Client, cfg Config, log logr.Logger) *Keeper {
	k := &Keeper{api: api, node: cfg.Node, retry: max(cfg.Retry, 100*time.Millisecond), log: log, pods: map[string]protocol.Pod{}}
	if cfg.StateDir != "" {
		k.path = filepath.Join(cfg.StateDir, File)
		k.load()
	}
	return k
}

// Pods returns the specs kept, ordered by namespace and name.
func (k *Keeper) Pods() []protocol.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sortedLocked()
}

func (k *Keeper) sortedLocked() []protocol.Pod {
	out := make([]protocol.Pod, 0, len(k.pods))
	for _, p := range k.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Metadata, out[j].Metadata
		return a.Namespace+"/"+a.Name+"/"+a.UID < b.Namespace+"/"+b.Name+"/"+b.UID
	})
	return out
}

// Run lists and watches the node's pods until ctx ends, trying again after a failure with a
// back-off (the kept specs stay meanwhile). A watch that fell behind (410 Gone) is no failure:
// the pods are listed again one retry later. The back-off starts over only after a watch that
// ran for maxRetry: a list that succeeds before a watch that fails at once (a proxy that cuts
// long requests) backs off like any failure, rather than listing every interval for ever.
func (k *Keeper) Run(ctx context.Context) {
	wait := k.retry
	for ctx.Err() == nil {
		healthy, err := k.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if healthy {
			wait = k.retry
		}
		if apiclient.IsStatus(err, http.StatusGone) {
			k.log.V(1).Info("the watch of this node's pods fell behind: listing them again")
		} else {
			k.setSynced(false, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, maxRetry)
	}
}

// follow lists the node's pods, then watches them from the list's resourceVersion, again and
// again, until a watch fails, or ends as soon as it began (which would otherwise spin);
// healthy says that one of its watches ran for maxRetry at least.
func (k *Keeper) follow(ctx context.Context) (healthy bool, err error) {
	op := "watching the pods of node " + k.node
	selector := url.Values{"fieldSelector": {"spec.nodeName=" + k.node}}
	pods, rv, err := apiclient.List[protocol.Pod](ctx, k.api, "listing the pods of node "+k.node, podsPath, selector)
	if err != nil {
		return false, err
	}
	k.replace(pods, time.Now())
	k.setSynced(true, nil)
	for {
		q := url.Values{"fieldSelector": selector["fieldSelector"], "resourceVersion": {rv},
			"allowWatchBookmarks": {"true"}, "timeoutSeconds": {watchSeconds}}
		began := time.Now()
		err := apiclient.Watch(ctx, k.api, op, podsPath, q, func(ev apiclient.Event[protocol.Pod]) error {
			if ev.ResourceVersion != "" {
				rv = ev.ResourceVersion
			}
			k.apply(ev, time.Now())
			return nil
		})
		ran := time.Since(began)
		healthy = healthy || ran >= maxRetry
		if err == nil && ran < time.Second {
			err = fmt.Errorf("%s: the API server ended the watch as soon as it began", op)
		}
		if err != nil {
			return healthy, err
		}
	}
}

// replace keeps exactly pods, as listed at at, and writes them.
func (k *Keeper) replace(pods []protocol.Pod, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = make(map[string]protocol.Pod, len(pods))
	for _, p := range pods {
		p.KeptAt = at
		k.pods[p.Metadata.UID] = p
	}
	k.saveLocked()
}

// apply takes one watch event, and writes the specs when what they keep changed.
func (k *Keeper) apply(ev apiclient.Event[protocol.Pod], at time.Time) {
	p := ev.Object
	uid := p.Metadata.UID
	if uid == "" {
		return // a BOOKMARK, or an object without a UID: nothing to keep
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	old, had := k.pods[uid]
	switch ev.Type {
	case "ADDED", "MODIFIED":
		p.KeptAt = at
		k.pods[uid] = p
		if !had || !sameSpec(old, p) {
			k.saveLocked()
		}
	case "DELETED":
		delete(k.pods, uid)
		if had {
			k.saveLocked()
		}
	}
}

// sameSpec says whether a and b keep the same fields (whenever they were sent).
func sameSpec(a, b protocol.Pod) bool {
	a.KeptAt, b.KeptAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// setSynced logs when the Keeper starts or stops following the API server.
func (k *Keeper) setSynced(on bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case on && k.state != "following":
		k.state = "following"
		k.log.Info("keeping the specs of this node's pods from the API server", "Node", k.node, "pods", len(k.pods))
	case !on && k.state != "failing":
		k.state = "failing"
		k.log.Error(err, "following this node's pods failed: the specs kept stay as they were; trying again with a back-off", "pods", len(k.pods))
	}
}
