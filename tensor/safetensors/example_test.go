package safetensors_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

func Example() {
	var buf bytes.Buffer
	err := safetensors.Encode(&buf, map[string]*tensor.Tensor{
		"w":    tensor.FromSlice([]float32{1, 2, 3, 4}, 2, 2).T(), // packed on write
		"step": tensor.Scalar(tensor.I64, 10),
	}, map[string]string{"format": "pt"})
	if err != nil {
		panic(err)
	}
	f, err := safetensors.Parse(buf.Bytes(), "ckpt.safetensors")
	if err != nil {
		panic(err)
	}
	for _, name := range f.Names() {
		fmt.Println(name, f.Tensors[name])
	}
	fmt.Println(f.Metadata)

	// A truncated file is rejected with its name and the offset.
	_, err = safetensors.Parse(buf.Bytes()[:buf.Len()-1], "ckpt.safetensors")
	var fe *safetensors.FormatError
	fmt.Println(errors.As(err, &fe), err)
	// Output:
	// step Tensor(i64 [] cpu [10])
	// w Tensor(f32 [2 2] cpu [1 3 2 4])
	// map[format:pt]
	// true safetensors: ckpt.safetensors: offset 99: tensor "w": data_offsets [8, 24] run past the data section of 23 bytes (file offset 176)
}
