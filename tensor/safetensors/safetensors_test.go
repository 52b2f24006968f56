package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/esper-go/esper/internal/fuzzcheck"
	"github.com/esper-go/esper/tensor"
)

// rawBytes returns t's elements packed row-major as raw bytes, which
// compares NaN payloads and signed zeros exactly.
func rawBytes(t *tensor.Tensor) []byte {
	c := t.Contiguous()
	sz := c.DType().Size()
	return append([]byte{}, c.Storage().Bytes()[c.Offset()*sz:(c.Offset()+c.Numel())*sz]...)
}

// sampleTensors covers every dtype, a rank-0 tensor, empty tensors and
// non-contiguous views.
func sampleTensors() map[string]*tensor.Tensor {
	vals := []float64{0, 1, -2.5, 3.25, -0.0, 1e-3, 65504, -7}
	m := map[string]*tensor.Tensor{}
	for _, d := range []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16, tensor.I32, tensor.I64, tensor.Bool} {
		m["t."+d.String()] = tensor.FromFloat64s(d, vals, 2, 4)
	}
	m["special.f32"] = tensor.FromSlice([]float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.SmallestNonzeroFloat32, math.MaxFloat32})
	m["special.f64"] = tensor.FromSlice([]float64{math.NaN(), math.Inf(-1), math.MaxFloat64, -math.SmallestNonzeroFloat64})
	m["big.i64"] = tensor.FromSlice([]int64{math.MinInt64, math.MaxInt64, 1<<53 + 1})
	m["scalar"] = tensor.Scalar(tensor.F32, 42)
	m["scalar.bool"] = tensor.Scalar(tensor.Bool, 1)
	m["empty"] = tensor.Zeros(tensor.F32, 0)
	m["empty.2d"] = tensor.Zeros(tensor.I64, 3, 0)
	m["transposed"] = tensor.FromFloat64s(tensor.I32, []float64{1, 2, 3, 4, 5, 6}, 2, 3).T()
	m["narrowed"] = tensor.FromFloat64s(tensor.BF16, []float64{1, 2, 3, 4, 5, 6}, 2, 3).Narrow(1, 1, 2)
	m["expanded"] = tensor.FromSlice([]float64{1, 2}).Unsqueeze(0).Expand(3, 2)
	m["unicode名前 <&>"] = tensor.FromSlice([]int32{9})
	return m
}

func checkSame(t *testing.T, got *File, want map[string]*tensor.Tensor, meta map[string]string) {
	t.Helper()
	if len(got.Tensors) != len(want) {
		t.Fatalf("got %d tensors, want %d: %v", len(got.Tensors), len(want), got.Names())
	}
	for n, w := range want {
		g, ok := got.Tensors[n]
		if !ok {
			t.Errorf("tensor %q missing", n)
			continue
		}
		if g.DType() != w.DType() || !tensor.SameShape(g.Shape(), w.Shape()) || g.Rank() != w.Rank() {
			t.Errorf("tensor %q: got %v %v, want %v %v", n, g.DType(), g.Shape(), w.DType(), w.Shape())
			continue
		}
		if !g.IsContiguous() {
			t.Errorf("tensor %q is not contiguous", n)
		}
		if !bytes.Equal(rawBytes(g), rawBytes(w)) {
			t.Errorf("tensor %q: bytes\n got %x\nwant %x", n, rawBytes(g), rawBytes(w))
		}
	}
	if meta == nil {
		meta = map[string]string{}
	}
	if !reflect.DeepEqual(got.Metadata, meta) {
		t.Errorf("metadata: got %v, want %v", got.Metadata, meta)
	}
}

func TestRoundTrip(t *testing.T) {
	in := sampleTensors()
	for _, meta := range []map[string]string{nil, {}, {"format": "pt", "note": "spaces and \"quotes\" and \n newlines", "": "empty key"}} {
		var b bytes.Buffer
		if err := Encode(&b, in, meta); err != nil {
			t.Fatal(err)
		}
		n := binary.LittleEndian.Uint64(b.Bytes())
		if n%8 != 0 {
			t.Errorf("header length %d is not a multiple of 8", n)
		}
		f, err := Parse(b.Bytes(), "roundtrip")
		if err != nil {
			t.Fatal(err)
		}
		checkSame(t, f, in, meta)

		// Re-encoding a parsed file gives the same bytes.
		var again bytes.Buffer
		if err := Encode(&again, f.Tensors, f.Metadata); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), b.Bytes()) {
			t.Error("re-encoding a parsed file changed its bytes")
		}
	}
}

func TestNames(t *testing.T) {
	f := &File{Tensors: map[string]*tensor.Tensor{"b": nil, "a.2": nil, "a.10": nil, "B": nil}}
	if got, want := f.Names(), []string{"B", "a.10", "a.2", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
}

func TestEncodeEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := Encode(&b, nil, nil); err != nil {
		t.Fatal(err)
	}
	// "{}" padded to 8: the smallest valid file.
	if got, want := hex.EncodeToString(b.Bytes()), "0800000000000000"+hex.EncodeToString([]byte("{}      ")); got != want {
		t.Errorf("empty file\n got %s\nwant %s", got, want)
	}
	f, err := Parse(b.Bytes(), "empty")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != 0 || len(f.Metadata) != 0 || f.Tensors == nil || f.Metadata == nil {
		t.Errorf("empty file parsed as %+v", f)
	}
}

// goldenHex is a file built by hand from the format description:
// tensors a = F32 [1, -2] (shape [2]) and b = I64 7 (rank 0), metadata
// {"k": "v"}.
var goldenHex = strings.Join([]string{
	"8800000000000000", // header length 136, little-endian u64
	hex.EncodeToString([]byte(`{"__metadata__":{"k":"v"},` +
		`"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},` +
		`"b":{"data_offsets":[8,16],"dtype":"I64","shape":[]}}` +
		"    ")), // 132 bytes of JSON + 4 spaces of padding
	"0000803f",         // 1.0f
	"000000c0",         // -2.0f
	"0700000000000000", // int64 7
}, "")

func TestGolden(t *testing.T) {
	golden, err := hex.DecodeString(goldenHex)
	if err != nil {
		t.Fatal(err)
	}
	tensors := map[string]*tensor.Tensor{
		"b": tensor.Scalar(tensor.I64, 7),
		"a": tensor.FromSlice([]float32{1, -2}),
	}
	var b bytes.Buffer
	if err := Encode(&b, tensors, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), golden) {
		t.Fatalf("Encode output differs from the hand-built file\n got %x\nwant %x", b.Bytes(), golden)
	}
	f, err := Parse(golden, "golden")
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, f, tensors, map[string]string{"k": "v"})
	if got := f.Tensors["b"].Rank(); got != 0 {
		t.Errorf("b has rank %d, want 0", got)
	}
}

func TestEncodeErrors(t *testing.T) {
	ok := tensor.Zeros(tensor.F32, 1)
	tests := []struct {
		name    string
		tensors map[string]*tensor.Tensor
		want    string
	}{
		{"reserved name", map[string]*tensor.Tensor{"__metadata__": ok}, `safetensors: tensor name "__metadata__" is reserved for metadata`},
		{"nil tensor", map[string]*tensor.Tensor{"a": ok, "x": nil}, `safetensors: tensor "x" is nil`},
	}
	for _, tc := range tests {
		var b bytes.Buffer
		err := Encode(&b, tc.tensors, nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
		if b.Len() != 0 {
			t.Errorf("%s: %d bytes written before the error", tc.name, b.Len())
		}
	}
}

// failWriter fails after n bytes.
type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, errors.New("disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

func TestEncodeWriteError(t *testing.T) {
	for _, n := range []int{0, 4, 8, 100, 300} {
		err := Encode(&failWriter{n: n}, sampleTensors(), nil)
		if err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("writer failing after %d bytes: error %v", n, err)
		}
	}
}

// file assembles a safetensors file from a header text and data bytes.
func file(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

func f32le(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func TestDecodeFormatErrors(t *testing.T) {
	const name = "model.st"
	two := f32le(1, 2) // 8 bytes
	hugeLen := binary.LittleEndian.AppendUint64(nil, 1000000)
	hugeLen = append(hugeLen, make([]byte, 112)...) // 120 bytes in all
	tests := []struct {
		name string
		data []byte
		off  int64 // -1: the offset of at within the file
		at   string
		msg  string
	}{
		{"shorter than the length field", []byte{1, 2, 3}, 0, "", "file of 3 bytes is shorter than the 8-byte header length"},
		{"empty input", nil, 0, "", "file of 0 bytes"},
		{"header length exceeds file", hugeLen, 8, "", "header length 1000000 exceeds file size 120"},
		{"header length beyond int64", append(binary.LittleEndian.AppendUint64(nil, math.MaxUint64), "{}"...), 8, "", "header length 18446744073709551615 exceeds file size 10"},
		{"empty header", file("", nil), 8, "", "header does not start with '{'"},
		{"header not an object", file(`[1,2]   `, nil), 8, "", "header does not start with '{'"},
		{"leading space", file(` {}     `, nil), 8, "", "header does not start with '{'"},
		{"invalid JSON", file(`{"a":{"dtype":"F32",,}}`, two), -1, `,}`, "invalid JSON: invalid character ','"},
		{"unterminated JSON", file(`{"a":{"dtype":"F32"`, two), 8 + 19, "", "invalid JSON: unexpected end of header"},
		{"truncated JSON object", file(`{"a":1`, nil), 14, "", "invalid JSON: unexpected end of header"},
		{"entry a number", file(`{"a":1}`, nil), -1, `1}`, "want a JSON object, found 1"},
		{"junk after JSON", file(`{}x     `, nil), 10, "", `invalid JSON: invalid character 'x' after top-level value`},
		{"bad literal", file(`{"a":tru}`, nil), -1, `}`, `invalid JSON: invalid character '}' in literal true`},
		{"missing colon", file(`{"a" 1}`, nil), -1, `1}`, `invalid JSON: invalid character '1' after object key`},
		{"tab padding", file("{}\t     ", nil), 10, "", `header has '\t' after its JSON object`},
		{"newline padding", file("{}\n     ", nil), 10, "", `header has '\n' after its JSON object`},
		{"invalid UTF-8", file("{\"a\xff\":{}}", nil), 11, "", "header is not valid UTF-8"},
		{"entry not an object", file(`{"a":[1]}`, nil), -1, `[1]`, "want a JSON object, found [1]"},
		{"duplicate tensor", file(`{"a":{"data_offsets":[0,4],"dtype":"F32","shape":[1]},"a":{"data_offsets":[4,8],"dtype":"F32","shape":[1]}}`, two), -1, `"a":{"data_offsets":[4`, `duplicate key "a"`},
		{"duplicate field", file(`{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, two), -1, `"dtype":"F32","shape`, `duplicate key "dtype"`},
		{"unknown dtype", file(`{"a":{"data_offsets":[0,8],"dtype":"U8","shape":[8]}}`, two), -1, `"U8"`, `tensor "a": unsupported dtype "U8"`},
		{"lower-case dtype", file(`{"a":{"data_offsets":[0,8],"dtype":"f32","shape":[2]}}`, two), -1, `"f32"`, `unsupported dtype "f32"`},
		{"dtype not a string", file(`{"a":{"data_offsets":[0,8],"dtype":7,"shape":[2]}}`, two), -1, `7,`, `dtype 7 is not a string`},
		{"missing dtype", file(`{"a":{"data_offsets":[0,8],"shape":[2]}}`, two), -1, `{"data_offsets"`, `tensor "a": missing dtype`},
		{"missing shape", file(`{"a":{"data_offsets":[0,8],"dtype":"F32"}}`, two), -1, `{"data_offsets"`, `tensor "a": missing shape`},
		{"missing offsets", file(`{"a":{"dtype":"F32","shape":[2]}}`, two), -1, `{"dtype"`, `tensor "a": missing data_offsets`},
		{"null shape", file(`{"a":{"data_offsets":[0,8],"dtype":"F32","shape":null}}`, two), -1, `null`, `tensor "a": "shape" is null`},
		{"unknown field", file(`{"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2],"extra":1}}`, two), -1, `1}`, `tensor "a": unknown field "extra"`},
		{"case-folded field", file(`{"a":{"data_offsets":[0,8],"DTYPE":"F32","shape":[2]}}`, two), -1, `"F32"`, `unknown field "DTYPE"`},
		{"negative dimension", file(`{"a":{"data_offsets":[0,8],"dtype":"F32","shape":[-1,-2]}}`, two), -1, `[-1,-2]`, `tensor "a": shape [-1 -2] has invalid dimension -1`},
		{"fractional dimension", file(`{"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2.0]}}`, two), -1, `[2.0]`, `shape [2.0] is not a list of integers`},
		{"shape not a list", file(`{"a":{"data_offsets":[0,8],"dtype":"F32","shape":2}}`, two), -1, `2}`, `shape 2 is not a list of integers`},
		{"three offsets", file(`{"a":{"data_offsets":[0,4,8],"dtype":"F32","shape":[2]}}`, two), -1, `[0,4,8]`, `data_offsets [0,4,8] is not a pair of integers`},
		{"offsets too big for int64", file(`{"a":{"data_offsets":[0,99999999999999999999],"dtype":"F32","shape":[2]}}`, two), -1, `[0,9`, `is not a pair of integers`},
		{"offsets reversed", file(`{"a":{"data_offsets":[8,0],"dtype":"F32","shape":[2]}}`, two), -1, `{"data_offsets"`, `tensor "a": invalid data_offsets [8, 0]`},
		{"negative offset", file(`{"a":{"data_offsets":[-8,0],"dtype":"F32","shape":[2]}}`, two), -1, `{"data_offsets"`, `invalid data_offsets [-8, 0]`},
		{"offsets out of range", file(`{"a":{"data_offsets":[0,12],"dtype":"F32","shape":[3]}}`, two), -1, `{"data_offsets"`, `tensor "a": data_offsets [0, 12] run past the data section of 8 bytes`},
		{"length does not match shape", file(`{"a":{"data_offsets":[0,8],"dtype":"F32","shape":[3]}}`, two), -1, `{"data_offsets"`, `tensor "a": 8 data bytes, but shape [3] of f32 needs 12`},
		{"length does not match dtype", file(`{"a":{"data_offsets":[0,8],"dtype":"F64","shape":[2]}}`, two), -1, `{"data_offsets"`, `8 data bytes, but shape [2] of f64 needs 16`},
		{"shape overflows", file(`{"a":{"data_offsets":[0,8],"dtype":"F32","shape":[4611686018427387904,4]}}`, two), -1, `{"data_offsets"`, `shape [4611686018427387904 4] of f32 is too large`},
		{"shape times size overflows", file(`{"a":{"data_offsets":[0,8],"dtype":"F64","shape":[2305843009213693952]}}`, two), -1, `{"data_offsets"`, `is too large`},
		{"overlap", file(`{"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},"b":{"data_offsets":[4,8],"dtype":"F32","shape":[1]}}`, two), -1, "", ""},
		{"gap", file(`{"a":{"data_offsets":[0,4],"dtype":"F32","shape":[1]},"b":{"data_offsets":[8,12],"dtype":"F32","shape":[1]}}`, f32le(1, 2, 3)), -1, "", ""},
		{"gap at start", file(`{"a":{"data_offsets":[4,8],"dtype":"F32","shape":[1]}}`, two), -1, "", ""},
		{"trailing bytes after last tensor", file(`{"a":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}}`, two), -1, "", ""},
		{"data but no tensors", file(`{}      `, []byte{0}), 16, "", "1 bytes after the last tensor are not covered by any tensor"},
		{"metadata not an object", file(`{"__metadata__":"x"}`, nil), -1, `"x"`, `want a JSON object, found "x"`},
		{"metadata value not a string", file(`{"__metadata__":{"a":"1","b":2}}`, nil), -1, `2}`, `metadata "b": value 2 is not a string`},
		{"metadata null value", file(`{"__metadata__":{"a":null}}`, nil), -1, `null`, `metadata "a": value null is not a string`},
		{"bad BOOL byte", file(`{"a":{"data_offsets":[0,3],"dtype":"BOOL","shape":[3]}}`, []byte{0, 1, 2}), -1, "", ""},
	}
	// Layout problems are reported at a position in the data section,
	// given here relative to its start.
	layout := map[string]struct {
		dataOff int64
		msg     string
	}{
		"overlap":                          {4, `tensor "b": data [4, 8] overlaps tensor "a" ending at 8`},
		"gap":                              {4, `gap of 4 unused bytes before tensor "b" at data offset 8`},
		"gap at start":                     {0, `gap of 4 unused bytes before tensor "a" at data offset 4`},
		"trailing bytes after last tensor": {4, `4 bytes after the last tensor are not covered by any tensor`},
		"bad BOOL byte":                    {2, `tensor "a": BOOL byte 0x02 is neither 0 nor 1`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			off, msg := tc.off, tc.msg
			if l, ok := layout[tc.name]; ok {
				off, msg = 8+int64(binary.LittleEndian.Uint64(tc.data))+l.dataOff, l.msg
			}
			if tc.at != "" {
				i := bytes.Index(tc.data, []byte(tc.at))
				if i < 0 {
					t.Fatalf("%q not in the test file", tc.at)
				}
				off = int64(i)
			}
			f, err := Parse(tc.data, name)
			if f != nil {
				t.Errorf("got a result together with error %v", err)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T), want *FormatError", err, err)
			}
			if fe.File != name || fe.Offset != off || !strings.Contains(fe.Msg, msg) {
				t.Errorf("got %q\nwant file %s, offset %d, message containing %q", err, name, off, msg)
			}
			if prefix := fmt.Sprintf("safetensors: %s: offset %d: ", name, off); !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("error %q does not start with %q", err, prefix)
			}
		})
	}
}

func TestDecodeReaderErrors(t *testing.T) {
	valid := validFile(t)
	// A reader holding more than the declared size.
	_, err := Decode(bytes.NewReader(append(append([]byte{}, valid...), 0)), int64(len(valid)), "long")
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Offset != int64(len(valid)) || !strings.Contains(fe.Msg, "continues past the declared size") {
		t.Errorf("longer input: %v", err)
	}
	// A reader that ends inside the data.
	_, err = Decode(bytes.NewReader(valid[:len(valid)-3]), int64(len(valid)), "short")
	if !errors.As(err, &fe) || fe.Offset != int64(len(valid)-3) || !strings.Contains(fe.Msg, "truncated") {
		t.Errorf("shorter input: %v", err)
	}
	// A declared size larger than the content describes.
	_, err = Decode(bytes.NewReader(valid), int64(len(valid))+5, "size")
	if !errors.As(err, &fe) || fe.Offset != int64(len(valid)) || !strings.Contains(fe.Msg, "5 bytes after the last tensor") {
		t.Errorf("larger declared size: %v", err)
	}
	// A failing reader: its error is wrapped, not a FormatError.
	boom := errors.New("boom")
	_, err = Decode(&errReader{data: valid[:20], err: boom}, int64(len(valid)), "failing")
	if !errors.Is(err, boom) || errors.As(err, &fe) || !strings.Contains(err.Error(), "safetensors: failing: offset 20: boom") {
		t.Errorf("failing reader: %v", err)
	}
}

type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func validFile(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	err := Encode(&b, map[string]*tensor.Tensor{
		"w":      tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3),
		"mask":   tensor.FromSlice([]bool{true, false, true}),
		"step":   tensor.Scalar(tensor.I64, 3),
		"h":      tensor.FromFloat64s(tensor.BF16, []float64{0.5, -1}),
		"empty":  tensor.Zeros(tensor.F16, 0, 2),
		"counts": tensor.FromSlice([]int32{-1, 7}),
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestTruncationAtEveryByte(t *testing.T) {
	valid := validFile(t)
	if _, err := Parse(valid, "valid"); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(valid); n++ {
		f, err := Parse(valid[:n], "cut")
		var fe *FormatError
		if f != nil || !errors.As(err, &fe) || fe.File != "cut" {
			t.Fatalf("prefix of %d of %d bytes: result %v, error %v", n, len(valid), f != nil, err)
		}
		if fe.Offset < 0 || fe.Offset > int64(len(valid)) {
			t.Fatalf("prefix of %d bytes: offset %d out of range", n, fe.Offset)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(validFile(f))
	var b bytes.Buffer
	if err := Encode(&b, sampleTensors(), map[string]string{"k": "v"}); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	golden, _ := hex.DecodeString(goldenHex)
	f.Add(golden)
	f.Add([]byte{})
	f.Add(file(`{}      `, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got *File
		var err error
		// The tensors are copies of the data: a few times the input, never
		// what a header alone claims.
		fuzzcheck.Budget(t, "Parse", len(data), fuzzcheck.Linear(len(data), 4, 256<<10), func() {
			got, err = Parse(data, "fuzz")
		})
		if err != nil {
			var fe *FormatError
			if got != nil || !errors.As(err, &fe) {
				t.Fatalf("result %v, error %v (%T)", got != nil, err, err)
			}
			return
		}
		// Whatever parses must survive a write and a read unchanged.
		var out bytes.Buffer
		if err := Encode(&out, got.Tensors, got.Metadata); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := Parse(out.Bytes(), "again")
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		checkSame(t, again, got.Tensors, got.Metadata)
	})
}
