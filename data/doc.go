// Package data provides the image-classification tasks Esper-Go trains
// on and a prefetching loader that feeds them to the trainer.
//
// A Dataset is a labelled set held in memory: images as one contiguous
// F32 tensor [N, C, H, W] of normalised values and labels as an I64
// tensor [N]. Batch copies chosen samples into caller-owned tensors
// without allocating, which is all a Loader needs.
//
// Two tasks ship with the package:
//
//   - Synthetic, the default task of `esper train`: procedurally
//     generated 1×28×28 images in 10 classes (oriented gratings under
//     clutter and noise), deterministic per seed, no files. It is built
//     so that a tiny CNN host stays well below a wider one, which is
//     what gives seeds room to earn their place.
//   - OpenFashionMNIST reads Fashion-MNIST from the IDX files of
//     Debian's dataset-fashion-mnist package (DefaultFashionMNISTDir) or
//     from any directory holding the four files, gzip-compressed or raw.
//
// Both normalise a pixel p in [0, 255] to (p/255 − Mean)/Std with the
// task's constants (see Normalization).
//
// The Open* functions validate their input and return errors, never
// panic: a truncated or corrupt file is a *FormatError naming the file
// and the byte offset. Batch and the Loader treat an out-of-range index
// or a mis-shaped destination as a programming error and panic, as slice
// indexing does.
//
// A Loader assembles batches on background goroutines ahead of the
// consumer into a small ring of recycled buffers: a batch is valid until
// the next call to Next (or until it is Released), and the steady state
// allocates nothing. Shuffling is a deterministic function of the seed
// and the epoch number.
package data
