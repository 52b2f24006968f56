// Package nn builds neural networks out of modules on top of autograd.
//
// A Module maps an input Var to an output Var and owns named parameters
// (autograd Vars that require gradients) and buffers (tensors such as
// BatchNorm's running statistics). Names follow PyTorch's state_dict
// convention, so checkpoints and reference fixtures line up by name:
// "weight" and "bias" for a layer, "0.weight" and "1.running_mean" inside a
// Sequential, "fc1.weight" for a child registered as "fc1" in a Composite.
//
// Layers are built from an options struct whose zero value is the PyTorch
// default (documented per field) and validated once by the constructor,
// which returns an error; the MustX variants panic instead and suit
// examples and tests. Layers with random initialisation take an explicit
// *rand.Rand (see tensor.NewRNG): there is no global randomness, and the
// default schemes match PyTorch's (init.go).
//
// Modules start in training mode. SetTraining (or Train and Eval) switches
// the behaviour of BatchNorm2d (batch versus running statistics) and
// Dropout (identity in evaluation) without rebuilding anything.
//
// Forward reads each parameter's Value on every call and never caches it:
// an optimizer arena may repoint Value to a view of its flat buffer at any
// time. For the same reason LoadStateDict copies into the existing tensors
// in place rather than replacing them.
//
// StateDict, LoadStateDict, Save and Load move parameters and buffers in
// and out of a module; Save writes a safetensors file atomically and Load
// validates everything before it changes anything, so a truncated or
// corrupt file leaves the module untouched.
package nn
