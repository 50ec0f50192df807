package v1alpha1

import (
	"encoding/json"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// AnnotationRemoval is a JSON patch (RFC 6902) that removes the annotations of values from the
// object of uid ("": whichever object it is sent to) only while each still holds its value
// there: one test fails, and the API server refuses the whole patch (422), so a value written
// since the caller read it survives. The annotations go in the order of their keys.
func AnnotationRemoval(uid types.UID, values map[string]string) []byte {
	var ops []map[string]string
	if uid != "" {
		ops = append(ops, map[string]string{"op": "test", "path": "/metadata/uid", "value": string(uid)})
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(k) // a JSON pointer
		ops = append(ops, map[string]string{"op": "test", "path": path, "value": values[k]}, map[string]string{"op": "remove", "path": path})
	}
	b, _ := json.Marshal(ops) // strings only: it cannot fail
	return b
}
