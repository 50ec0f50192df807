package orders

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/pki"
)

// TokenFile is the file, in the agent's state directory (--state-dir), that holds the highest
// fencing token the agent took, as a decimal number.
const TokenFile = "fencing-token"

// tokenStore keeps the highest fencing token the agent took, on disk when it has a state
// directory, so that an agent restarted between two fences still refuses the older one's
// orders. It is used under the Commander's lock.
type tokenStore struct {
	path    string // "" keeps the token in memory only
	highest int64
	// broken, when set, is why the file could not be read: every order is refused until an
	// operator fixes or removes it, since the agent cannot tell an older order from a newer one.
	broken error
}

// refusal is an order the agent does not carry out, with the reason it reports.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }

// loadTokens reads the highest token from dir; "" keeps tokens in memory only.
func loadTokens(dir string) *tokenStore {
	if dir == "" {
		return &tokenStore{}
	}
	s := &tokenStore{path: filepath.Join(dir, TokenFile)}
	raw, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s
	case err != nil:
		s.broken = fmt.Errorf("reading the fencing-token file %s: %w", s.path, err)
		return s
	}
	tok, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || tok < 0 {
		s.broken = fmt.Errorf("the fencing-token file %s holds %q, not a token: fix it or remove it to accept orders again (removing it forgets which orders are older)", s.path, truncate(string(raw), 40))
		return s
	}
	s.highest = tok
	return s
}

// take accepts tok unless it is older than the highest token taken, recording a newer one
// durably before the order is carried out.
func (s *tokenStore) take(cmd agentwire.Command) error {
	if s.broken != nil {
		return &refusal{agentwire.ReasonTokenNotRecorded, fmt.Errorf("refused: %w", s.broken)}
	}
	if cmd.Token < s.highest {
		carries := fmt.Sprintf("fencing token %d", cmd.Token)
		if cmd.Token == 0 {
			carries = "no fencing token"
		}
		return &refusal{agentwire.ReasonStaleToken, fmt.Errorf(
			"refused: order %s carries %s, older than token %d this node already took from a later fence; a late or replayed order is never carried out",
			cmd.ID, carries, s.highest)}
	}
	if cmd.Token == s.highest {
		return nil
	}
	if err := s.write(cmd.Token); err != nil {
		return &refusal{agentwire.ReasonTokenNotRecorded, fmt.Errorf(
			"refused: recording fencing token %d before carrying order %s out: %w", cmd.Token, cmd.ID, err)}
	}
	s.highest = cmd.Token
	return nil
}

// write records tok durably (pki.WriteFileAtomic: synced, through a rename, so that a crash
// leaves the old token or the new one, never a torn one).
func (s *tokenStore) write(tok int64) error {
	if s.path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return err
	}
	return pki.WriteFileAtomic(s.path, []byte(strconv.FormatInt(tok, 10)+"\n"))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
