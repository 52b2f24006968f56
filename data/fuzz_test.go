package data_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/internal/fuzzcheck"
)

// inflated is the size of b's IDX content: b itself, or what its gzip
// member decompresses to (counted up to 64 MiB).
func inflated(b []byte) int {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return len(b)
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(zr, 64<<20))
	return max(int(n), len(b))
}

// FuzzOpenIDX feeds OpenIDX arbitrary image and label files, raw or
// gzip: it returns a data set or an error, never panics, and allocates in
// proportion to what the files hold (a header's promise costs nothing
// until data backs it).
func FuzzOpenIDX(f *testing.F) {
	img, lab := smallSet(3)
	images, labels := idxBytes([]int{3, 28, 28}, img), idxBytes([]int{3}, lab)
	f.Add(images, labels)
	f.Add(gzipBytes(f, images), gzipBytes(f, labels))
	f.Add(images[:20], labels)
	f.Add(idxBytes([]int{1 << 24, 4096, 4096}, nil), labels)
	dir := f.TempDir()
	ip, lp := filepath.Join(dir, "images"), filepath.Join(dir, "labels")
	f.Fuzz(func(t *testing.T, images, labels []byte) {
		if err := os.WriteFile(ip, images, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lp, labels, 0o644); err != nil {
			t.Fatal(err)
		}
		// Bytes kept, float32 pixels and int64 labels: about 13 bytes per
		// byte of content at most, plus the readers' buffers (64 KiB
		// each, and gzip's window).
		n := inflated(images) + inflated(labels)
		fuzzcheck.Budget(t, "OpenIDX", len(images)+len(labels), fuzzcheck.Linear(n, 16, 2<<20), func() {
			ds, err := data.OpenIDX("fuzz", ip, lp, 10, data.FashionMNISTNormalization)
			if (ds == nil) == (err == nil) {
				t.Fatalf("data set %v with error %v", ds != nil, err)
			}
		})
	})
}
