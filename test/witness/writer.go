package witness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Writer is one replica's side: it opens a session and appends a counter every Interval until
// ctx ends, reopening a session the store no longer knows and retrying through errors (a
// partitioned writer keeps trying, as a database keeps trying its disk).
type Writer struct {
	// URL is the store's base URL, e.g. "http://10.231.0.20:7070".
	URL string
	Identity
	// Interval defaults to 100ms.
	Interval time.Duration
	// Client defaults to one with a 1s timeout.
	Client *http.Client
	// Logf receives errors and session changes.
	Logf func(format string, args ...any)
}

// Run writes until ctx ends; it returns the number of appends the store accepted.
func (w *Writer) Run(ctx context.Context) int64 {
	if w.Interval <= 0 {
		w.Interval = 100 * time.Millisecond
	}
	if w.Client == nil {
		w.Client = &http.Client{Timeout: time.Second}
	}
	if w.Logf == nil {
		w.Logf = func(string, ...any) {}
	}
	var session string
	var counter, accepted int64
	tick := time.NewTicker(w.Interval)
	defer tick.Stop()
	for {
		if session == "" {
			s, err := w.open(ctx)
			if err != nil {
				w.Logf("opening a session: %v", err)
			} else {
				session = s
				w.Logf("session %s open", session)
			}
		} else {
			counter++
			switch err := w.post(ctx, "/v1/append", map[string]any{"session": session, "counter": counter}, nil); {
			case err == errUnknownSession:
				w.Logf("session %s unknown to the store: opening another", session)
				session = ""
			case err != nil:
				w.Logf("appending %d: %v", counter, err)
			default:
				accepted++
			}
		}
		select {
		case <-ctx.Done():
			return accepted
		case <-tick.C:
		}
	}
}

func (w *Writer) open(ctx context.Context) (string, error) {
	var resp struct {
		Session string `json:"session"`
	}
	if err := w.post(ctx, "/v1/open", w.Identity, &resp); err != nil {
		return "", err
	}
	return resp.Session, nil
}

func (w *Writer) post(ctx context.Context, path string, body, into any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := w.Client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusNotFound:
		return errUnknownSession
	case res.StatusCode >= 300:
		return fmt.Errorf("store answered %s", res.Status)
	case into != nil:
		return json.NewDecoder(res.Body).Decode(into)
	}
	return nil
}
