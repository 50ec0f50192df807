package fencing

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// TokenLeaseName is the Lease, in the controller's namespace, whose annotation
// AnnotationLastToken holds the last fencing token handed out.
const TokenLeaseName = "palisade-fencing-token.fencing.palisade.dev"

// AnnotationLastToken is the annotation of the token Lease that holds the last token handed out.
const AnnotationLastToken = "fencing.palisade.dev/last-token"

// tokenAttempts bounds how often Next retries after another replica took the token first;
// each retry waits a random time up to tokenBackoff, so that replicas drawing at once take
// turns instead of colliding again.
const (
	tokenAttempts = 20
	tokenBackoff  = 50 * time.Millisecond
)

// TokenSource hands out fencing tokens: each larger than every token handed out before,
// whichever controller replica asks.
type TokenSource interface {
	Next(ctx context.Context) (int64, error)
}

// Tokens is the cluster-wide fencing-token counter: a Lease whose annotation holds the last
// token, advanced by compare-and-swap (an update that names the resourceVersion it read), so
// that two replicas, or a replica that lost leadership without knowing it, never hand out the
// same token or a smaller one. A counter that was deleted, or is behind, starts over above the
// highest token recorded on a NodeFence.
type Tokens struct {
	// Reader reads the Lease from the API server (not a cache: a stale read only costs a
	// conflict, but every read would be stale while the cache does not hold the Lease).
	Reader client.Reader
	// Writer writes the Lease and lists NodeFences.
	Writer client.Client
	// Lease names the counter.
	Lease types.NamespacedName

	// mu serializes this process's draws (the fences advance in parallel workers): they would
	// only conflict with each other.
	mu sync.Mutex
}

var _ TokenSource = (*Tokens)(nil)

// Next advances the counter and returns the new token.
func (t *Tokens) Next(ctx context.Context) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Read once: a token recorded meanwhile came from this counter, which already covers it.
	floor, err := t.highestRecorded(ctx)
	if err != nil {
		return 0, err
	}
	for attempt := range tokenAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("advancing the fencing-token Lease %s: %w", t.Lease, ctx.Err())
			case <-time.After(rand.N(tokenBackoff)):
			}
		}
		l := &coordinationv1.Lease{}
		err := t.Reader.Get(ctx, t.Lease, l)
		if apierrors.IsNotFound(err) {
			if floor == math.MaxInt64 {
				return 0, fmt.Errorf("a NodeFence records %d as its token, the highest token there is: no token can outrank it, and the fencing-token Lease %s is gone. Create the Lease with %s set to the highest token any agent or storage gateway has taken, and delete that NodeFence", floor, t.Lease, AnnotationLastToken)
			}
			next := floor + 1
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: t.Lease.Namespace, Name: t.Lease.Name,
				Annotations: map[string]string{AnnotationLastToken: strconv.FormatInt(next, 10)}}}
			err = t.Writer.Create(ctx, l)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("creating the fencing-token Lease %s: %w", t.Lease, err)
			}
			return next, nil
		}
		if err != nil {
			return 0, fmt.Errorf("reading the fencing-token Lease %s: %w", t.Lease, err)
		}
		raw := l.Annotations[AnnotationLastToken]
		last, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || last < 0 {
			return 0, fmt.Errorf("the fencing-token Lease %s holds %q in %s, not a token: delete the Lease, and the counter starts over above the highest token recorded on a NodeFence", t.Lease, raw, AnnotationLastToken)
		}
		if max(last, floor) == math.MaxInt64 {
			return 0, fmt.Errorf("the fencing-token Lease %s holds %d in %s, the highest token there is: no token can outrank it. Set it back to the highest token any agent or storage gateway has taken (the agents log theirs) and no lower", t.Lease, last, AnnotationLastToken)
		}
		next := max(last, floor) + 1
		l.Annotations[AnnotationLastToken] = strconv.FormatInt(next, 10)
		err = t.Writer.Update(ctx, l) // carries the resourceVersion read: a compare-and-swap
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("advancing the fencing-token Lease %s: %w", t.Lease, err)
		}
		return next, nil
	}
	return 0, fmt.Errorf("advancing the fencing-token Lease %s: another writer won %d times in a row", t.Lease, tokenAttempts)
}

// highestRecorded is the highest token recorded on a NodeFence: its fence's token or its
// storage fence's lift token, each drawn from the counter and sent to agents or gateways.
func (t *Tokens) highestRecorded(ctx context.Context) (int64, error) {
	list := &v1alpha1.NodeFenceList{}
	if err := t.Writer.List(ctx, list); err != nil {
		return 0, fmt.Errorf("listing NodeFences for their fencing tokens: %w", err)
	}
	var highest int64
	for i := range list.Items {
		highest = max(highest, list.Items[i].Status.Token, list.Items[i].Status.LiftToken)
	}
	return highest, nil
}
