package data

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// DefaultFashionMNISTDir is where Debian's dataset-fashion-mnist package
// installs the Fashion-MNIST files.
const DefaultFashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// FashionMNISTClasses is the number of Fashion-MNIST classes.
const FashionMNISTClasses = 10

// FashionMNISTNormalization holds the mean and standard deviation of the
// Fashion-MNIST training pixels on the [0, 1] scale (the customary
// constants 0.2860 and 0.3530).
var FashionMNISTNormalization = Normalization{Mean: 0.2860, Std: 0.3530}

// The IDX file names of Fashion-MNIST, without the .gz suffix.
const (
	fmTrainImages = "train-images-idx3-ubyte"
	fmTrainLabels = "train-labels-idx1-ubyte"
	fmTestImages  = "t10k-images-idx3-ubyte"
	fmTestLabels  = "t10k-labels-idx1-ubyte"
)

// OpenFashionMNIST reads Fashion-MNIST from dir (DefaultFashionMNISTDir
// when empty): 60000 training and 10000 test images, 1×28×28, 10
// classes, normalised with FashionMNISTNormalization. Each of the four
// IDX files may be gzip-compressed (name.gz, as Debian ships them) or
// raw (name). A missing directory or file is an error wrapping
// fs.ErrNotExist that says how to get the data; a malformed one is a
// *FormatError. OpenFashionMNIST never panics.
func OpenFashionMNIST(dir string) (train, test *TensorDataset, err error) {
	if dir == "" {
		dir = DefaultFashionMNISTDir
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		if err == nil {
			err = fmt.Errorf("not a directory")
		}
		return nil, nil, fmt.Errorf("data: fashion-mnist: %s: %w; install it with `apt-get install dataset-fashion-mnist` (files in %s) or pass --data-dir with the four IDX files: %w",
			dir, err, DefaultFashionMNISTDir, fs.ErrNotExist)
	}
	open := func(name, images, labels string, maxN int) (*TensorDataset, error) {
		ip, err := findIDX(dir, images)
		if err != nil {
			return nil, err
		}
		lp, err := findIDX(dir, labels)
		if err != nil {
			return nil, err
		}
		return openIDXSized(name, ip, lp, FashionMNISTClasses, FashionMNISTNormalization, idxShape{H: 28, W: 28, MaxN: maxN})
	}
	if train, err = open("fashion-mnist/train", fmTrainImages, fmTrainLabels, 60000); err != nil {
		return nil, nil, err
	}
	if test, err = open("fashion-mnist/test", fmTestImages, fmTestLabels, 10000); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// findIDX returns the path of base.gz or base in dir, preferring the
// compressed file.
func findIDX(dir, base string) (string, error) {
	for _, name := range []string{base + ".gz", base} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("data: fashion-mnist: %w", err)
		}
	}
	return "", fmt.Errorf("data: fashion-mnist: %s has neither %s.gz nor %s; install the data with `apt-get install dataset-fashion-mnist` or pass --data-dir: %w",
		dir, base, base, fs.ErrNotExist)
}
