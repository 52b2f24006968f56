// Package rollback is Tolaria's two-tier rollback (esper-reference
// §3.1.6): when an epoch fails, the trainer restores the model and
// optimizer from the most recent good state.
//
// A State holds what is restored: named tensors (model parameters and
// buffers, optimizer state, seed weights) and a JSON Meta (epoch, step,
// RNG words, slot documents, trainer extras). The trainer fills it, with
// helpers for nn modules, optimizers and kasmina slots.
//
// The fast tier, FastCache, keeps deep copies of recent States in memory,
// keyed by global step, in an LRU bounded in bytes. The slow tier, Store,
// writes one safetensors checkpoint per epoch plus a WAL record carrying
// CRC-32s of the checkpoint and of itself; every file is written
// atomically (temporary file, fsync, rename, fsync of the directory), and
// a corrupt, truncated or missing file is refused with a *CorruptError
// naming it, never half-loaded. Each checkpoint also carries a checksum of
// its own, so that LatestIntact can fall back to the newest older one that
// verifies when the latest is corrupt (a resume's choice; the failure
// rollback stays with Latest). TwoTier tries the fast tier, then reads
// the last checkpoint under a deadline, and reports the
// tolaria.rollback.* metrics.
//
// A State's tensors may lie on a device (the model's): the fast tier
// copies them there with the device's backend, Write brings them to the
// host in one copy per device and dtype (nn.HostCopies), and ApplyModule
// and ApplyOptimizer copy a state read from disk to the module's or the
// optimizer's device before loading it.
package rollback
