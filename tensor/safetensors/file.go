package safetensors

import (
	"fmt"
	"io"

	"github.com/esper-go/esper/internal/atomicfile"
	"github.com/esper-go/esper/tensor"
)

// testHookBeforeRename, when set by a test, runs after the temporary file
// is written and synced and before it is renamed; an error aborts the
// write.
var testHookBeforeRename func(tmp string) error

// WriteFile writes tensors and metadata to path atomically: it encodes
// into a temporary file in the same directory, syncs and closes it,
// renames it over path and syncs the directory. On any error the
// temporary file is removed and an existing file at path is left as it
// was. A new file gets mode 0644; a replaced one keeps its mode.
func WriteFile(path string, tensors map[string]*tensor.Tensor, metadata map[string]string) error {
	var encodeErr error
	err := atomicfile.Write(path, func(w io.Writer) error {
		encodeErr = Encode(w, tensors, metadata)
		return encodeErr
	}, atomicfile.Options{BeforeRename: testHookBeforeRename})
	switch {
	case err == nil:
		return nil
	case encodeErr != nil:
		return encodeErr // already says "safetensors: ..."
	}
	return fmt.Errorf("safetensors: write %s: %w", path, err)
}
