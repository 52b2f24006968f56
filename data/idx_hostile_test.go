package data_test

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/internal/fuzzcheck"
)

// openPair writes images and labels into a directory and opens them with
// OpenIDX.
func openPair(t *testing.T, images, labels []byte) error {
	t.Helper()
	dir := t.TempDir()
	ip, lp := filepath.Join(dir, "images"), filepath.Join(dir, "labels")
	if err := os.WriteFile(ip, images, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lp, labels, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := data.OpenIDX("test", ip, lp, 10, data.FashionMNISTNormalization)
	return err
}

// TestIDXHeaderOfHugePromise: the 16-byte header 00000803 01000000
// 00001000 00001000 (2^24 images of 4096×4096, 2^48 bytes) is refused
// from the header alone, allocating next to nothing (it used to reserve
// 64 MiB before finding the file truncated); so is a header whose labels
// do not match the images, before either file's data is read.
func TestIDXHeaderOfHugePromise(t *testing.T) {
	hdr, _ := hex.DecodeString("00000803010000000000100000001000")
	_, lab := smallSet(2)
	for _, gz := range []bool{false, true} {
		img := hdr
		if gz {
			img = gzipBytes(t, hdr)
		}
		var err error
		n := fuzzcheck.Allocated(func() { err = openPair(t, img, idxBytes([]int{2}, lab)) })
		var fe *data.FormatError
		if !errors.As(err, &fe) || fe.Offset != 4 || !strings.Contains(fe.Msg, "promise") {
			t.Errorf("gzip %v: %v, want a *FormatError at offset 4 about the promised size", gz, err)
		}
		if n > 1<<20 {
			t.Errorf("gzip %v: %d bytes allocated for a 16-byte header", gz, n)
		}
	}
	// 1000 images promised (784 000 bytes), 3 labels: refused before the
	// images are read, though the image data is missing.
	var err error
	n := fuzzcheck.Allocated(func() { err = openPair(t, idxBytes([]int{1000, 28, 28}, nil), idxBytes([]int{3}, lab[:2])) })
	if err == nil || !strings.Contains(err.Error(), "3 labels for the 1000 images") {
		t.Errorf("count mismatch: %v", err)
	}
	if n > 1<<19 {
		t.Errorf("count mismatch: %d bytes allocated", n)
	}
}

// TestIDXGzipTrailingData: a gzip stream followed by garbage, or by a
// second gzip member, is refused (both used to be accepted).
func TestIDXGzipTrailingData(t *testing.T) {
	img, lab := smallSet(3)
	images := gzipBytes(t, idxBytes([]int{3, 28, 28}, img))
	labels := gzipBytes(t, idxBytes([]int{3}, lab))
	if err := openPair(t, images, labels); err != nil {
		t.Fatalf("the clean files: %v", err)
	}
	for name, tail := range map[string][]byte{
		"garbage":       []byte("garbage"),
		"second member": gzipBytes(t, []byte{1, 2, 3}),
		"one zero byte": {0},
	} {
		err := openPair(t, append(append([]byte(nil), images...), tail...), labels)
		var fe *data.FormatError
		if !errors.As(err, &fe) || !strings.Contains(fe.Msg, "after the gzip stream") {
			t.Errorf("%s after the images' gzip stream: %v", name, err)
		}
		err = openPair(t, images, append(append([]byte(nil), labels...), tail...))
		if !errors.As(err, &fe) || !strings.Contains(fe.Msg, "after the gzip stream") {
			t.Errorf("%s after the labels' gzip stream: %v", name, err)
		}
	}
}

// TestFashionMNISTChecksHeadersFirst: a crafted Fashion-MNIST file of
// 2^24 images whose gzip body is tiny is refused by its header (more than
// 60 000 training images; other sizes than 28×28), not read into memory.
func TestFashionMNISTChecksHeadersFirst(t *testing.T) {
	for _, dims := range [][]int{{1 << 24, 28, 28}, {60001, 28, 28}, {100, 4096, 4096}} {
		dir := writeFashion(t, true, 3, 3)
		img := gzipBytes(t, idxBytes(dims, nil))
		if err := os.WriteFile(filepath.Join(dir, "train-images-idx3-ubyte.gz"), img, 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		n := fuzzcheck.Allocated(func() { _, _, err = data.OpenFashionMNIST(dir) })
		var fe *data.FormatError
		if !errors.As(err, &fe) {
			t.Errorf("dims %v: %v, want a *FormatError", dims, err)
		}
		if n > 1<<20 {
			t.Errorf("dims %v: %d bytes allocated", dims, n)
		}
	}
}
