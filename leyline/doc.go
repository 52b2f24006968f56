// Package leyline holds the contracts every Esper domain shares: the seed
// lifecycle (SeedStage and its transitions), slot ids, injection specs
// and host blocks (BlockInfo), the alpha enums, the factored action
// space (the eight heads in the fixed order HeadNames, their option
// tables, causal relevance and action masks), the V3 observation,
// telemetry event types with typed payloads, and metric names.
//
// Leyline owns no behaviour: it validates, encodes and decodes (sampling
// from the masks, MaskedCategorical and the probability floors, is
// Tamiyo's). Kasmina, Tolaria, Tamiyo, Simic and Nissa all speak in
// these types, so a value that crosses a package boundary (a stage, a
// slot id, an event) means the same thing on both sides.
//
// The values follow the second generation of the Python Esper
// (esper-reference.md §1). Stage value 5 is reserved (it was SHADOWING)
// and is rejected everywhere a stage enters from outside, with the
// caller's context in the error.
package leyline
