package strictjson

import (
	"errors"
	"testing"
)

func TestNoDuplicateKeys(t *testing.T) {
	for _, tc := range []struct {
		in  string
		dup bool
	}{
		{`{"a":1,"b":2}`, false},
		{`{"a":1,"a":2}`, true},
		{`{"a":{"x":1},"b":{"x":2}}`, false}, // the same key in two objects
		{`{"a":{"x":1,"x":2}}`, true},
		{`[{"a":1},{"a":1}]`, false},
		{`{"a":[1,{"b":2,"b":3}]}`, true},
		{`{"a":"a","b":"a"}`, false}, // equal string values are not keys
		{`{"a":[],"a":{}}`, true},
		{`{"\u0061":1,"a":2}`, true}, // compared unescaped
		{`{"k":{"a":1},"z":[{"a":1}],"a":1}`, false},
	} {
		err := NoDuplicateKeys([]byte(tc.in))
		if got := errors.Is(err, ErrDuplicateKey); got != tc.dup {
			t.Errorf("%s: error %v, want duplicate %v", tc.in, err, tc.dup)
		}
	}
	if err := NoDuplicateKeys([]byte(`{"a":`)); err == nil || errors.Is(err, ErrDuplicateKey) {
		t.Errorf("a syntax error: %v", err)
	}
}

// TestOneValue: a JSON text is one value; data after it is an error
// (as encoding/json.Unmarshal has it), found at the second value's first
// token, so that a file of many small values is refused without
// tokenising all of them. Whitespace after the value is fine.
func TestOneValue(t *testing.T) {
	for _, in := range []string{`00`, `0 0`, `{} {}`, `[1] 2`, `"a""b"`, `{"a":1}{"a":1}`} {
		err := NoDuplicateKeys([]byte(in))
		if err == nil || errors.Is(err, ErrDuplicateKey) {
			t.Errorf("%s: error %v, want one about the data after the value", in, err)
		}
	}
	for _, in := range []string{`0`, `{"a":[1,2]} `, "[]\n", `"x"`} {
		if err := NoDuplicateKeys([]byte(in)); err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
	many := make([]byte, 4000)
	for i := range many {
		many[i] = '0'
	}
	allocs := testing.AllocsPerRun(5, func() { _ = NoDuplicateKeys(many) })
	if allocs > 50 {
		t.Errorf("4000 zeros: %v allocations, want the second value refused at once", allocs)
	}
}
