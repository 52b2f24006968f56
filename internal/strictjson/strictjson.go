// Package strictjson holds the checks our readers of JSON add to
// encoding/json, which silently keeps the last of two equal keys in an
// object: a file whose meaning depends on which duplicate a reader keeps
// is refused instead.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrDuplicateKey is wrapped by NoDuplicateKeys' error.
var ErrDuplicateKey = errors.New("duplicate JSON key")

// NoDuplicateKeys returns an error wrapping ErrDuplicateKey, naming the
// key and its byte offset, when an object anywhere in the JSON value b
// has the same key twice; a syntax error is returned as encoding/json
// reports it, and data after the value (a second value) is an error
// too. Keys are compared after unescaping, as encoding/json
// compares them when it decodes into a map.
func NoDuplicateKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	// One set of keys per open object; nil for an open array.
	var stack []map[string]bool
	expectKey := func() bool { return len(stack) > 0 && stack[len(stack)-1] != nil }
	key := true       // in an object: the next string token is a key
	complete := false // the top-level value has ended
	for {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) > 0 || !key {
				return io.ErrUnexpectedEOF
			}
			return nil
		}
		if err != nil {
			return err
		}
		if complete {
			// A JSON text is one value: a second (which the decoder's
			// stream would read on, one token at a time) is refused at
			// once, as encoding/json.Unmarshal refuses it.
			return fmt.Errorf("invalid JSON: more data after the top-level value, at offset %d", off)
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, map[string]bool{})
				key = true
				continue
			case '[':
				stack = append(stack, nil)
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if expectKey() && key {
				seen := stack[len(stack)-1]
				if seen[t] {
					return fmt.Errorf("%w %q at offset %d", ErrDuplicateKey, t, off)
				}
				seen[t] = true
				key = false
				continue
			}
		}
		// A value ended (scalar, or a closed object or array): in an
		// object the next string is a key again; at the top level the
		// document is complete.
		key = true
		complete = len(stack) == 0
	}
}
