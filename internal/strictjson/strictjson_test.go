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
