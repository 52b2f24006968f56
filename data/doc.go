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
//
// # Batches on a device
//
// With LoaderOptions.Device set to a device other than the CPU, the
// loader delivers its batches there, in device buffers it owns, and the
// consumer (tolaria's trainer) copies nothing. There are two ways:
//
//   - Copied ahead (the default): the workers assemble each batch on the host
//     as above, and Next copies it to the device one batch ahead of the
//     consumer — when it returns batch i, batch i+1's copy has been
//     issued, so that on CUDA it runs behind step i. With Pinned on a
//     backend that stages (kernels.Stagers, the CUDA backend) the copies
//     go through page-locked buffers on the backend's copy stream into
//     two device buffer sets, double-buffered with events: Next awaits
//     batch i's copy (the device's stream waits, the host does not),
//     releases the set batch i−1 was read from (its steps are enqueued:
//     the consumer asked for the next batch) and stages batch i+1 into
//     it. On any other backend (sim) the same sequence runs with
//     synchronous copies (tensor.ToDevice). Either way the host batch
//     goes back to the workers as soon as its copy is issued.
//   - Resident: the whole dataset is copied to the device once; each
//     epoch's order is copied there once (a single I64 [N] copy) and
//     every batch is two index selects (images and labels) of the
//     dataset by a slice of it, on the device's stream.
//
// Both give the batches of the host loader with the same options bit
// for bit, and neither reads anything back from the device: they add no
// host sync (tensor.HostSyncs). LoaderStats says how many copies were
// issued and how long the consumer spent issuing them (CopyTime, what
// tolaria reports as tolaria.h2d_copy_ms); Loader.Pinned whether they
// went through pinned staging (tolaria.train.pin_memory).
package data
