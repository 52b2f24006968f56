// Package safetensors reads and writes the safetensors format, the
// checkpoint and fixture format Esper-Go shares with PyTorch and the
// Hugging Face tools.
//
// A file is an 8-byte little-endian unsigned length N, then N bytes of
// JSON header, then the data section. The header maps each tensor name
// to {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative
// to the start of the data section, plus an optional "__metadata__"
// object of string to string. Data are little-endian and row-major.
//
// Reading is strict: a header that does not parse, an unknown dtype, a
// byte length that does not match the shape, offsets that overlap, leave
// a gap or run past the data, or bytes after the last tensor are all
// rejected with a *FormatError naming the file and the byte offset of
// the problem. A reader never panics on bad input and never returns a
// partly loaded file.
//
// Writing sorts tensors by name, packs non-contiguous ones, pads the
// header with spaces to a multiple of 8 bytes, and (WriteFile) replaces
// the target atomically. The supported dtypes are F64, F32, BF16, F16,
// I32, I64 and BOOL.
package safetensors
