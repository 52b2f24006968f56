// Package blueprint is Kasmina's catalog of seed architectures: the
// modules a slot can germinate. A blueprint is registered under a
// topology ("cnn" for CNNHost activations [N, C, H, W], "mlp" for
// MLPHost activations [N, C]) and a name ("conv_light"), with a parameter
// estimate used to order the catalog and to price a seed before it is
// built.
//
// Every seed is shape-preserving: its output has the shape of its input.
// Build checks that with a probe forward pass (eval mode, no grad) before
// returning the module, so a broken blueprint fails at germination rather
// than inside a training step.
package blueprint
