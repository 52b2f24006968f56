package data_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/esper-go/esper/data"
)

// idxBytes encodes an unsigned-byte IDX file with the given dimensions.
func idxBytes(dims []int, payload []byte) []byte {
	var b bytes.Buffer
	b.Write([]byte{0, 0, 0x08, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	b.Write(payload)
	return b.Bytes()
}

func gzipBytes(t testing.TB, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// smallSet returns n 28×28 images whose pixels encode (sample, position)
// and labels i mod 10.
func smallSet(n int) (images, labels []byte) {
	images = make([]byte, n*28*28)
	for i := range images {
		images[i] = byte(i*7 + i/784)
	}
	labels = make([]byte, n)
	for i := range labels {
		labels[i] = byte(i % 10)
	}
	return images, labels
}

// writeFashion writes the four Fashion-MNIST files into a new directory,
// gzip-compressed or raw, and returns the directory.
func writeFashion(t testing.TB, gz bool, nTrain, nTest int) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, raw []byte) {
		if gz {
			name, raw = name+".gz", gzipBytes(t, raw)
		}
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct {
		prefix string
		n      int
	}{{"train", nTrain}, {"t10k", nTest}} {
		img, lab := smallSet(s.n)
		write(s.prefix+"-images-idx3-ubyte", idxBytes([]int{s.n, 28, 28}, img))
		write(s.prefix+"-labels-idx1-ubyte", idxBytes([]int{s.n}, lab))
	}
	return dir
}

func TestOpenFashionMNISTSmallFiles(t *testing.T) {
	for _, gz := range []bool{true, false} {
		dir := writeFashion(t, gz, 12, 5)
		train, test, err := data.OpenFashionMNIST(dir)
		if err != nil {
			t.Fatalf("gzip %v: %v", gz, err)
		}
		if train.Len() != 12 || test.Len() != 5 || train.Classes() != 10 {
			t.Fatalf("gzip %v: lengths %d/%d classes %d", gz, train.Len(), test.Len(), train.Classes())
		}
		if s := train.Shape(); s[0] != 1 || s[1] != 28 || s[2] != 28 {
			t.Fatalf("shape %v", s)
		}
		img, lab := smallSet(12)
		xs, ys := train.Images().F32(), train.Labels().I64()
		norm := data.FashionMNISTNormalization
		for i, p := range img {
			if xs[i] != norm.Apply(p) {
				t.Fatalf("gzip %v: pixel %d = %v, want %v", gz, i, xs[i], norm.Apply(p))
			}
		}
		for i, l := range lab {
			if ys[i] != int64(l) {
				t.Fatalf("label %d = %d, want %d", i, ys[i], l)
			}
		}
	}
}

func TestOpenIDXRejectsCorruptFiles(t *testing.T) {
	img, lab := smallSet(3)
	goodImages := idxBytes([]int{3, 28, 28}, img)
	goodLabels := idxBytes([]int{3}, lab)
	badLabel := append([]byte(nil), goodLabels...)
	badLabel[8+2] = 10 // sample 2
	wrongType := append([]byte(nil), goodImages...)
	wrongType[2] = 0x0d // float
	cases := []struct {
		name           string
		images, labels []byte
		file           string // "images" or "labels": which file the error names
		offset         int64
		msg            string
	}{
		{"empty images", nil, goodLabels, "images", 0, "truncated magic"},
		{"truncated magic", goodImages[:3], goodLabels, "images", 3, "truncated magic"},
		{"truncated dims", goodImages[:10], goodLabels, "images", 10, "truncated dimension 1"},
		{"truncated header end", goodImages[:16], goodLabels, "images", 16, "truncated:"},
		{"truncated pixels", goodImages[:16+784+100], goodLabels, "images", 16 + 784 + 100, "truncated:"},
		{"one byte short", goodImages[:len(goodImages)-1], goodLabels, "images", int64(len(goodImages) - 1), "truncated:"},
		{"trailing bytes", append(append([]byte(nil), goodImages...), 1), goodLabels, "images", int64(len(goodImages)), "trailing"},
		{"wrong magic", append([]byte{1, 2}, goodImages[2:]...), goodLabels, "images", 0, "bad magic"},
		{"wrong type", wrongType, goodLabels, "images", 2, "element type"},
		{"labels as images", goodLabels, goodLabels, "images", 3, "1 dimensions, want 3"},
		{"zero images", idxBytes([]int{0, 28, 28}, nil), goodLabels, "images", 4, "dimension 0 is 0"},
		{"huge claim", idxBytes([]int{1 << 30, 28, 28}, img), goodLabels, "images", 4, "dimension 0 is"},
		{"truncated labels", goodImages, goodLabels[:9], "labels", 9, "truncated:"},
		{"label out of range", goodImages, badLabel, "labels", 10, "label 10 of sample 2"},
		{"count mismatch", goodImages, idxBytes([]int{2}, lab[:2]), "labels", 4, "2 labels for the 3 images"},
	}
	for _, c := range cases {
		for _, gz := range []bool{false, true} {
			dir := t.TempDir()
			ip, lp := filepath.Join(dir, "images"), filepath.Join(dir, "labels")
			im, lb := c.images, c.labels
			if gz {
				im, lb = gzipBytes(t, im), gzipBytes(t, lb)
			}
			os.WriteFile(ip, im, 0o644)
			os.WriteFile(lp, lb, 0o644)
			_, err := data.OpenIDX("test", ip, lp, 10, data.FashionMNISTNormalization)
			var fe *data.FormatError
			if !errors.As(err, &fe) {
				t.Errorf("%s (gzip %v): error %v, want a *FormatError", c.name, gz, err)
				continue
			}
			want := map[string]string{"images": ip, "labels": lp}[c.file]
			if fe.File != want || fe.Offset != c.offset || fe.Compressed != gz || !strings.Contains(fe.Msg, c.msg) {
				t.Errorf("%s (gzip %v): got %+v, want file %s offset %d compressed %v message containing %q", c.name, gz, fe, want, c.offset, gz, c.msg)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: message %q does not name the file", c.name, err)
			}
		}
	}
}

// A gzip stream cut short, or with a corrupted body, fails with a
// *FormatError naming the file; no prefix of it is ever accepted.
func TestOpenIDXTruncatedGzip(t *testing.T) {
	img, lab := smallSet(4)
	full := gzipBytes(t, idxBytes([]int{4, 28, 28}, img))
	labels := gzipBytes(t, idxBytes([]int{4}, lab))
	dir := t.TempDir()
	lp := filepath.Join(dir, "labels.gz")
	os.WriteFile(lp, labels, 0o644)
	for _, cut := range []int{1, 2, 5, 10, 20, len(full) / 2, len(full) - 8, len(full) - 1} {
		ip := filepath.Join(dir, "images.gz")
		os.WriteFile(ip, full[:cut], 0o644)
		_, err := data.OpenIDX("test", ip, lp, 10, data.FashionMNISTNormalization)
		var fe *data.FormatError
		if !errors.As(err, &fe) || fe.File != ip {
			t.Errorf("cut at %d of %d: error %v, want a *FormatError for %s", cut, len(full), err, ip)
		}
	}
	// Flip a byte in the middle of the deflate stream: either the
	// decompressor or the CRC check must notice.
	bad := append([]byte(nil), full...)
	bad[len(bad)/2] ^= 0xff
	ip := filepath.Join(dir, "flipped.gz")
	os.WriteFile(ip, bad, 0o644)
	if _, err := data.OpenIDX("test", ip, lp, 10, data.FashionMNISTNormalization); err == nil {
		t.Error("a corrupted gzip body was accepted")
	}
}

func TestOpenFashionMNISTMissing(t *testing.T) {
	_, _, err := data.OpenFashionMNIST(filepath.Join(t.TempDir(), "nowhere"))
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "apt-get install dataset-fashion-mnist") || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("missing directory: %v", err)
	}
	dir := writeFashion(t, true, 3, 2)
	os.Remove(filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"))
	_, _, err = data.OpenFashionMNIST(dir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "t10k-labels-idx1-ubyte") {
		t.Fatalf("missing file: %v", err)
	}
}

// Fashion-MNIST has 28×28 images; a set of 20×20 IDX images is refused.
func TestOpenFashionMNISTWrongSize(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "train-images-idx3-ubyte"), idxBytes([]int{2, 20, 20}, make([]byte, 800)), 0o644)
	os.WriteFile(filepath.Join(dir, "train-labels-idx1-ubyte"), idxBytes([]int{2}, []byte{1, 2}), 0o644)
	_, _, err := data.OpenFashionMNIST(dir)
	var fe *data.FormatError
	if !errors.As(err, &fe) || !strings.Contains(fe.Msg, "28×28") {
		t.Fatalf("20×20 images: %v", err)
	}
}

// The real files, when Debian's dataset-fashion-mnist is installed.
func TestOpenFashionMNISTInstalled(t *testing.T) {
	if _, err := os.Stat(data.DefaultFashionMNISTDir); err != nil {
		t.Skipf("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	train, test, err := data.OpenFashionMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 60000 || test.Len() != 10000 {
		t.Fatalf("%d train and %d test images, want 60000 and 10000", train.Len(), test.Len())
	}
	counts := make([]int, 10)
	for _, l := range train.Labels().I64() {
		counts[l]++
	}
	for c, n := range counts {
		if n != 6000 {
			t.Errorf("class %d has %d training images, want 6000", c, n)
		}
	}
	// The normalisation constants are the training set's mean and std.
	var sum, sq float64
	for _, v := range train.Images().F32() {
		p := data.FashionMNISTNormalization.Invert(v)
		sum += p
		sq += p * p
	}
	n := float64(len(train.Images().F32()))
	mean := sum / n
	std := sq/n - mean*mean
	t.Logf("train pixel mean %.4f, variance %.4f (std %.4f)", mean, std, math.Sqrt(std))
	if d := mean - data.FashionMNISTNormalization.Mean; d > 1e-3 || d < -1e-3 {
		t.Errorf("mean %.4f, constant %.4f", mean, data.FashionMNISTNormalization.Mean)
	}
}
