package data_test

import (
	"strconv"
	"testing"

	"github.com/esper-go/esper/data"
)

// Generation of the default synthetic task (6000 + 1000 images).
func BenchmarkSynthetic(b *testing.B) {
	for b.Loop() {
		if _, _, err := data.Synthetic(data.SyntheticOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(7000*b.N)/b.Elapsed().Seconds(), "images/s")
}

// Loader throughput: batches of 128 synthetic images, shuffled, with the
// consumer doing nothing; input_wait is the share of time Next waited.
func BenchmarkLoader(b *testing.B) {
	train, _, err := data.Synthetic(data.SyntheticOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, workers := range []int{1, 2} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			l, err := data.NewLoader(train, data.LoaderOptions{BatchSize: 128, Shuffle: true, Workers: workers})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.ReportAllocs()
			epoch := 0
			for b.Loop() {
				if _, ok := l.Next(); !ok {
					epoch++
					l.Reset(epoch)
				}
			}
			st := l.Stats()
			b.ReportMetric(float64(st.Batches*128)/b.Elapsed().Seconds(), "samples/s")
			b.ReportMetric(float64(st.InputWait.Nanoseconds())/float64(max(1, st.Batches)), "input_wait_ns/batch")
		})
	}
}

// Epochs of the demo-sized task (3000 synthetic images, batches of 128,
// shuffled, the last partial batch dropped) delivered on sim: copied
// ahead (two synchronous copies per batch) or from the resident dataset
// (index selects, the order copied once per epoch), beside the host
// loader; copy_ms/epoch is LoaderStats.CopyTime per epoch.
func BenchmarkDeviceLoaderEpoch(b *testing.B) {
	train, _, err := data.Synthetic(data.SyntheticOptions{Train: 3000, Test: 1})
	if err != nil {
		b.Fatal(err)
	}
	dev := accelerator(b)
	for _, c := range []struct {
		name string
		o    data.LoaderOptions
	}{
		{"host", data.LoaderOptions{}},
		{"copied-ahead", data.LoaderOptions{Device: dev, Pinned: true}},
		{"resident", data.LoaderOptions{Device: dev, Resident: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			o := c.o
			o.BatchSize, o.Shuffle, o.Seed, o.DropLast = 128, true, 1, true
			l, err := data.NewLoader(train, o)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			before := l.Stats().CopyTime - l.Stats().ResidentCopyTime
			epoch := 0
			for b.Loop() {
				for range l.Epoch(epoch) {
				}
				epoch++
			}
			copyTime := l.Stats().CopyTime - l.Stats().ResidentCopyTime - before
			b.ReportMetric(float64(copyTime.Nanoseconds())/1e6/float64(epoch), "copy_ms/epoch")
		})
	}
}
