package witness

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

// Identity names a writer: one copy of one pet.
type Identity struct {
	Pod    string `json:"pod"`
	PodUID string `json:"podUID"`
	Node   string `json:"node"`
	BootID string `json:"bootID"`
}

// Record kinds.
const (
	KindOpen   = "open"
	KindAppend = "append"
)

// Record is one accepted write.
type Record struct {
	Seq     int64     `json:"seq"`
	Arrival time.Time `json:"arrival"` // the store's clock when it accepted the write
	Kind    string    `json:"kind"`
	Session string    `json:"session"`
	Identity
	Counter int64 `json:"counter,omitempty"`
}

// Store keeps sessions and the history; Handler serves it.
type Store struct {
	mu       sync.Mutex
	sessions map[string]Identity
	seq      int64
	file     *os.File
	out      *bufio.Writer
	now      func() time.Time
	// Indexes for the tests' waits, so that a poll need not read the history back.
	firstByUID map[string]Record    // the first append of each pod UID
	lastByPod  map[string]time.Time // the arrival of each pod name's latest append
}

// NewStore appends the history to path (created when missing).
func NewStore(path string) (*Store, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the witness history: %w", err)
	}
	return &Store{sessions: map[string]Identity{}, file: f, out: bufio.NewWriter(f), now: time.Now,
		firstByUID: map[string]Record{}, lastByPod: map[string]time.Time{}}, nil
}

// Close flushes and closes the history.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.out.Flush(), s.file.Close())
}

// History is the history so far, read whole: flushed and read under the store's lock, so
// that no record is read half-written while writers go on (the buffer writes out whatever
// fills it, a record's first part too).
func (s *Store) History() ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.out.Flush(); err != nil {
		return nil, err
	}
	return ReadHistory(s.file.Name())
}

// accept records one write; open creates its session.
func (s *Store) accept(kind, session string, id Identity, counter int64) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind == KindOpen {
		s.seq++
		session = fmt.Sprintf("s%d", s.seq)
		s.sessions[session] = id
	} else {
		known, ok := s.sessions[session]
		if !ok {
			return Record{}, errUnknownSession
		}
		id = known
		s.seq++
	}
	r := Record{Seq: s.seq, Arrival: s.now().UTC(), Kind: kind, Session: session, Identity: id, Counter: counter}
	b, err := json.Marshal(r)
	if err != nil {
		return Record{}, err
	}
	if _, err := s.out.Write(append(b, '\n')); err != nil {
		return Record{}, fmt.Errorf("writing the witness history: %w", err)
	}
	if kind == KindAppend {
		if _, ok := s.firstByUID[id.PodUID]; !ok {
			s.firstByUID[id.PodUID] = r
		}
		s.lastByPod[id.Pod] = r.Arrival
	}
	return r, nil
}

// FirstAppend is the first accepted append of the pod with this UID.
func (s *Store) FirstAppend(podUID string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.firstByUID[podUID]
	return r, ok
}

// LastAppend is when the latest append of any pod named pod was accepted (zero if none).
func (s *Store) LastAppend(pod string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastByPod[pod]
}

var errUnknownSession = errors.New("unknown session")

// Handler serves POST /v1/open (an Identity; answers {"session": …}) and POST /v1/append
// ({"session": …, "counter": n}; 404 for an unknown session).
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/open", func(w http.ResponseWriter, r *http.Request) {
		var id Identity
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&id); err != nil || id.Pod == "" {
			http.Error(w, "want a JSON identity with a pod name", http.StatusBadRequest)
			return
		}
		rec, err := s.accept(KindOpen, "", id, 0)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"session": rec.Session})
	})
	mux.HandleFunc("POST /v1/append", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Session string `json:"session"`
			Counter int64  `json:"counter"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
			http.Error(w, "want {session, counter}", http.StatusBadRequest)
			return
		}
		_, err := s.accept(KindAppend, req.Session, Identity{}, req.Counter)
		switch {
		case errors.Is(err, errUnknownSession):
			http.Error(w, err.Error(), http.StatusNotFound)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	return mux
}

// ReadHistory reads a history file back, in arrival order.
func ReadHistory(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the witness history: %w", err)
	}
	defer f.Close()
	var h []Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("reading the witness history: record %d: %w", len(h)+1, err)
		}
		h = append(h, r)
	}
	return h, sc.Err()
}
