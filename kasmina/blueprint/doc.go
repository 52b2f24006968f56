// Package blueprint is Kasmina's catalog of seed architectures: the
// modules a slot can germinate. A blueprint is registered under a
// topology ("cnn" for CNNHost activations [N, C, H, W], "mlp" for
// MLPHost activations [N, C]) and a name ("conv_light"), with a parameter
// estimate used to order the catalog and to price a seed before it is
// built.
//
// Every seed is shape-preserving: its output has the shape of its input.
// Build checks that with a probe forward pass (eval mode, no graph)
// before returning the module, so a broken blueprint fails at germination
// rather than inside a training step.
//
// The built-in catalog is the G2 one (esper-reference §2.2). For cnn:
// noop, norm, attention (a squeeze-and-excitation gate), depthwise,
// bottleneck, conv_small, conv_light and conv_heavy; for mlp: noop, norm,
// lora (rank 8), lora_large (rank 32), mlp_small (2× hidden) and mlp (4×).
// Each Spec's Description gives its formula and which layer starts at
// zero. Estimates hold at CNNReferenceChannels and MLPReferenceChannels.
// The catalog is registered on first use of the package's functions, not
// at import.
//
// Seeds built by Build are *Seed values: nn.Modules whose parameters
// carry state-dict names ("conv.weight", "gn.bias"), built in the
// Options' DType (F32 by default, F64 for gradient checks). With
// Options.ZeroFinal the final Linear or Conv layer starts at zero, so a
// residual seed starts as the identity, as Kasmina's MULTIPLY blend wants.
// Where that layer feeds GroupNorm and then ReLU (conv_small always;
// depthwise, conv_light and conv_heavy with ZeroFinal) the branch also
// gets no gradient, since ReLU'(0) = 0: the reference's design, kept as
// written.
package blueprint
