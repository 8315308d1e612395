package watcher

import (
	"encoding/json"
	"fmt"

	"kvlive/instancetype"
)

// specOf marshals the spec of any of the four watched kinds.
func specOf(obj any) (json.RawMessage, error) {
	spec, ok := instancetype.SpecOf(obj)
	if !ok {
		return nil, fmt.Errorf("watcher: unexpected object %T", obj)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("watcher: marshal spec: %w", err)
	}
	return b, nil
}
