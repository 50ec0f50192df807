package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// listPage is how many objects a List asks for at a time, so that a page of large objects
// (each may carry up to 256 KiB of annotations) never costs the agent more than a few MiB.
const listPage = 50

// maxPage bounds the answer to one page.
const maxPage = 32 << 20

// List reads the whole collection at path (with query q, e.g. a fieldSelector) a page at a
// time, decoding each object as T, which holds only the fields the caller reads. It returns
// the objects and the list's resourceVersion, from which a Watch of the same query goes on.
func List[T any](ctx context.Context, a *Client, op, path string, q url.Values) ([]T, string, error) {
	var items []T
	cont := ""
	for {
		page := url.Values{"limit": {strconv.Itoa(listPage)}}
		for k, v := range q {
			page[k] = v
		}
		if cont != "" {
			page.Set("continue", cont)
		}
		var list struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
				Continue        string `json:"continue"`
			} `json:"metadata"`
			Items []T `json:"items"`
		}
		resp, err := a.Send(ctx, op, http.MethodGet, path+"?"+page.Encode(), nil)
		if err != nil {
			return nil, "", err
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, maxPage)).Decode(&list)
		Drain(resp.Body)
		if err != nil {
			return nil, "", fmt.Errorf("%s: decoding the answer: %w", op, err)
		}
		items = append(items, list.Items...)
		if list.Metadata.Continue == "" {
			return items, list.Metadata.ResourceVersion, nil
		}
		cont = list.Metadata.Continue
	}
}

// Event is one event of a Watch: its type (ADDED, MODIFIED, DELETED or BOOKMARK), its object
// decoded as T, and the object's resourceVersion, from which a new watch goes on.
type Event[T any] struct {
	Type            string
	Object          T
	ResourceVersion string
}

// Watch follows the collection at path (with query q; watch=true is added) and calls fn with
// every event, until fn returns an error (returned as it is), the server ends the watch (nil:
// its timeoutSeconds passed) or ctx ends. An ERROR event is returned as an *Error: 410 Gone
// says that the resourceVersion watched from is too old, and the caller lists again.
func Watch[T any](ctx context.Context, a *Client, op, path string, q url.Values, fn func(Event[T]) error) error {
	query := url.Values{"watch": {"true"}}
	for k, v := range q {
		query[k] = v
	}
	resp, err := a.Send(ctx, op, http.MethodGet, path+"?"+query.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if ev.Type == "ERROR" {
			return watchError(op, ev.Object)
		}
		var meta struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		out := Event[T]{Type: ev.Type}
		if err := json.Unmarshal(ev.Object, &out.Object); err != nil {
			return fmt.Errorf("%s: decoding an event: %w", op, err)
		}
		if err := json.Unmarshal(ev.Object, &meta); err != nil {
			return fmt.Errorf("%s: decoding an event: %w", op, err)
		}
		out.ResourceVersion = meta.Metadata.ResourceVersion
		if err := fn(out); err != nil {
			return err
		}
	}
}

// watchError is the *Error of an ERROR event, whose object is a Status.
func watchError(op string, raw json.RawMessage) error {
	var st struct {
		Code            int
		Reason, Message string
	}
	if err := json.Unmarshal(raw, &st); err != nil || st.Code == 0 {
		return fmt.Errorf("%s: the watch ended with an error: %s", op, raw)
	}
	return &Error{op: op, Code: st.Code, Reason: st.Reason, Message: st.Message}
}
