package data_test

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/esper-go/esper/data"
)

// The synthetic task: two splits of 1×28×28 images in 10 classes,
// generated from a seed.
func ExampleSynthetic() {
	train, test, err := data.Synthetic(data.SyntheticOptions{Train: 1000, Test: 200, Seed: 1})
	if err != nil {
		panic(err)
	}
	fmt.Println(train.Name(), train.Len(), train.Shape(), train.Classes())
	fmt.Println(test.Name(), test.Len())
	// Output:
	// synthetic/train 1000 [1 28 28] 10
	// synthetic/test 200
}

// A shuffled loader over a dataset: a batch is valid until the next one
// is taken.
func ExampleLoader() {
	train, _, err := data.Synthetic(data.SyntheticOptions{Train: 300, Test: 10})
	if err != nil {
		panic(err)
	}
	loader, err := data.NewLoader(train, data.LoaderOptions{BatchSize: 128, Shuffle: true, Seed: 1})
	if err != nil {
		panic(err)
	}
	defer loader.Close()
	for epoch := range 2 {
		for b := range loader.Epoch(epoch) {
			// Train on b.X (F32 [B 1 28 28]) and b.Y (I64 [B]) here.
			fmt.Println(epoch, b.Index, b.X.Shape(), b.Y.Shape())
		}
	}
	// Output:
	// 0 0 [128 1 28 28] [128]
	// 0 1 [128 1 28 28] [128]
	// 0 2 [44 1 28 28] [44]
	// 1 0 [128 1 28 28] [128]
	// 1 1 [128 1 28 28] [128]
	// 1 2 [44 1 28 28] [44]
}

// Fashion-MNIST from Debian's dataset-fashion-mnist package, or from
// another directory; a missing installation is reported as fs.ErrNotExist
// with instructions.
func ExampleOpenFashionMNIST() {
	train, test, err := data.OpenFashionMNIST(data.DefaultFashionMNISTDir)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Println("not installed:", err)
		return
	}
	if err != nil {
		panic(err)
	}
	fmt.Println(train.Len(), test.Len(), train.Shape())
}
