package podspecs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/providers/executor/protocol"
)

// File is the file, in the agent's state directory (--state-dir), that holds the specs kept,
// as JSON (stored).
const File = "pod-specs.json"

// stored is File's content. Node names the node whose pods they are: a file of another node's
// is not used.
type stored struct {
	Node string         `json:"node"`
	Pods []protocol.Pod `json:"pods"`
}

// load takes the specs from File. A file missing, unreadable or of another node leaves none:
// the executor then restores those pods from the runtime's labels, as without the API server.
func (k *Keeper) load() {
	raw, err := os.ReadFile(k.path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var s stored
	if err == nil {
		err = json.Unmarshal(raw, &s)
	}
	if err == nil && s.Node != k.node {
		err = fmt.Errorf("it holds the pods of node %q", s.Node)
	}
	if err != nil {
		k.log.Error(err, "not using the pod specs kept on disk: until the API server answers, pods are restored from the runtime's labels", "file", k.path)
		return
	}
	for _, p := range s.Pods {
		k.pods[p.Metadata.UID] = p
	}
	k.log.Info("pod specs kept on disk loaded", "file", k.path, "pods", len(k.pods))
}

// saveLocked writes the specs to File (pki.WriteFileAtomic: synced, through a rename, so that a
// crash leaves the old file or the new one, never a torn one); k.mu is held. A failure is
// logged: the specs in memory are still handed to the executor.
func (k *Keeper) saveLocked() {
	if k.path == "" {
		return
	}
	raw, err := json.Marshal(stored{Node: k.node, Pods: k.sortedLocked()})
	if err == nil {
		err = os.MkdirAll(filepath.Dir(k.path), 0o700)
	}
	if err == nil {
		err = pki.WriteFileAtomic(k.path, raw)
	}
	if err != nil {
		k.log.Error(err, "writing the pod specs kept to disk failed: an agent restarted while the API server is unreachable would have older ones", "file", k.path)
	}
}
