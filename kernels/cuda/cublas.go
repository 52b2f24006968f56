//go:build cuda

package cuda

// cuBLAS through dlopen (GPU.md): the library is looked up at run time as
// libcublas.so.13, .12 or .11 (or ESPER_CUBLAS_LIB), so the binary runs
// with whatever CUDA the target machine has and links only libcuda. The
// few prototypes used are declared here by hand; the enum values are
// those of cublas_api.h and library_types.h (stable across CUDA 11–13).

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

typedef int (*cublasCreate_t)(void **);
typedef int (*cublasDestroy_t)(void *);
typedef int (*cublasSetStream_t)(void *, void *);
typedef int (*cublasSetMathMode_t)(void *, int);
typedef int (*cublasSetWorkspace_t)(void *, void *, size_t);
typedef int (*cublasGemmEx_t)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int,
                              int, const void *, void *, int, int, int, int);
typedef int (*cublasGemmStridedBatchedEx_t)(void *, int, int, int, int, int, const void *, const void *, int, int,
                                            long long, const void *, int, int, long long, const void *, void *, int,
                                            int, long long, int, int, int);

static struct {
	void *lib;
	cublasCreate_t create;
	cublasDestroy_t destroy;
	cublasSetStream_t setStream;
	cublasSetMathMode_t setMathMode;
	cublasSetWorkspace_t setWorkspace;
	cublasGemmEx_t gemmEx;
	cublasGemmStridedBatchedEx_t gemmStridedBatchedEx;
} esper_blas;

// esper_blas_open loads path and resolves every symbol; it returns the
// name of the first missing symbol, "dlopen" when the library itself did
// not load, or NULL.
static const char *esper_blas_open(const char *path) {
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) return "dlopen";
#define SYM(field, name)                                 \
	esper_blas.field = (__typeof__(esper_blas.field))dlsym(lib, name); \
	if (!esper_blas.field) return name;
	SYM(create, "cublasCreate_v2")
	SYM(destroy, "cublasDestroy_v2")
	SYM(setStream, "cublasSetStream_v2")
	SYM(setMathMode, "cublasSetMathMode")
	SYM(setWorkspace, "cublasSetWorkspace_v2")
	SYM(gemmEx, "cublasGemmEx")
	SYM(gemmStridedBatchedEx, "cublasGemmStridedBatchedEx")
#undef SYM
	esper_blas.lib = lib;
	return NULL;
}

static const char *esper_dlerror(void) { return dlerror(); }

static int esper_blas_create(void **h) { return esper_blas.create(h); }
static int esper_blas_destroy(void *h) { return esper_blas.destroy(h); }
static int esper_blas_set_stream(void *h, void *s) { return esper_blas.setStream(h, s); }
static int esper_blas_set_math_mode(void *h, int m) { return esper_blas.setMathMode(h, m); }
static int esper_blas_set_workspace(void *h, uint64_t w, size_t n) { return esper_blas.setWorkspace(h, (void *)w, n); }

static int esper_blas_gemm(void *h, int ta, int tb, int m, int n, int k, float alpha, uint64_t a, int at, int lda,
                           uint64_t b, int bt, int ldb, float beta, uint64_t c, int ct, int ldc, int compute) {
	return esper_blas.gemmEx(h, ta, tb, m, n, k, &alpha, (const void *)a, at, lda, (const void *)b, bt, ldb, &beta,
	                         (void *)c, ct, ldc, compute, -1);
}

static int esper_blas_gemm_batched(void *h, int ta, int tb, int m, int n, int k, float alpha, uint64_t a, int at,
                                   int lda, long long sa, uint64_t b, int bt, int ldb, long long sb, float beta,
                                   uint64_t c, int ct, int ldc, long long sc, int batch, int compute) {
	return esper_blas.gemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, (const void *)a, at, lda, sa, (const void *)b,
	                                       bt, ldb, sb, &beta, (void *)c, ct, ldc, sc, batch, compute, -1);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"gorgonia.org/cu"
)

// cuBLAS enum values used here.
const (
	blasOpN = 0
	blasOpT = 1

	dataF32  = 0  // CUDA_R_32F
	dataF16  = 2  // CUDA_R_16F
	dataBF16 = 14 // CUDA_R_16BF

	computeF32       = 68 // CUBLAS_COMPUTE_32F
	computeF32TF32   = 77 // CUBLAS_COMPUTE_32F_FAST_TF32
	computeF32FastBF = 75 // CUBLAS_COMPUTE_32F_FAST_16BF

	mathDefault  = 0 // CUBLAS_DEFAULT_MATH
	mathPedantic = 2 // CUBLAS_PEDANTIC_MATH
	mathTF32     = 3 // CUBLAS_TF32_TENSOR_OP_MATH
)

// cublasCandidates are the sonames tried in order (ESPER_CUBLAS_LIB
// first when set).
var cublasCandidates = []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}

// blasError is a failed cuBLAS call.
type blasError struct {
	call   string
	status int
}

func (e *blasError) Error() string {
	return fmt.Sprintf("cuda: %s failed with cuBLAS status %d", e.call, e.status)
}

func blasCheck(call string, st C.int) error {
	if st == 0 {
		return nil
	}
	return &blasError{call: call, status: int(st)}
}

// blasLib is the loaded library's soname (set once by loadCublas).
var blasLib string

// loadCublas dlopens cuBLAS, trying ESPER_CUBLAS_LIB and then the
// candidates; the error lists what was tried.
func loadCublas() error {
	if blasLib != "" {
		return nil
	}
	tried := cublasCandidates
	if env := os.Getenv("ESPER_CUBLAS_LIB"); env != "" {
		tried = append([]string{env}, tried...)
	}
	var why []string
	for _, name := range tried {
		cs := C.CString(name)
		missing := C.esper_blas_open(cs)
		C.free(unsafe.Pointer(cs))
		if missing == nil {
			blasLib = name
			return nil
		}
		m := C.GoString(missing)
		if m == "dlopen" {
			m = C.GoString(C.esper_dlerror())
		} else {
			m = "missing symbol " + m
		}
		why = append(why, name+": "+m)
	}
	return fmt.Errorf("cuda: cuBLAS not found (set ESPER_CUBLAS_LIB to its path): %v", why)
}

// blasHandle is a cuBLAS handle bound to the device's stream, with a
// workspace from the device's allocator (so that graph capture works).
type blasHandle struct {
	h  unsafe.Pointer
	ws cu.DevicePtr
}

// workspaceBytes is the cuBLAS workspace (32 MiB: what cuBLAS asks for on
// Hopper for its largest kernels).
const workspaceBytes = 32 << 20

func newBlasHandle(d *Device) (*blasHandle, error) {
	return newBlasHandleOn(d, d.stream)
}

// newBlasHandleOn is newBlasHandle bound to stream s (a side stream's
// handle: sideLanes), with a workspace of its own.
func newBlasHandleOn(d *Device, s cu.Stream) (*blasHandle, error) {
	if err := loadCublas(); err != nil {
		return nil, err
	}
	release := d.enter()
	defer release()
	var b blasHandle
	if err := blasCheck("cublasCreate", C.esper_blas_create(&b.h)); err != nil {
		return nil, err
	}
	if err := blasCheck("cublasSetStream", C.esper_blas_set_stream(b.h, unsafe.Pointer(cstream(s)))); err != nil {
		b.destroy(d)
		return nil, err
	}
	ws, err := d.alloc.Alloc(workspaceBytes)
	if err != nil {
		b.destroy(d)
		return nil, err
	}
	b.ws = ws
	if err := blasCheck("cublasSetWorkspace", C.esper_blas_set_workspace(b.h, C.uint64_t(ws), workspaceBytes)); err != nil {
		b.destroy(d)
		return nil, err
	}
	return &b, nil
}

// destroy frees the handle and returns its workspace to d's allocator
// (a handle whose making failed partway: sideLanes).
func (b *blasHandle) destroy(d *Device) {
	if b.h != nil {
		C.esper_blas_destroy(b.h)
		b.h = nil
	}
	if b.ws != 0 {
		_ = d.alloc.Free(b.ws)
		b.ws = 0
	}
}

// gemmRowMajor computes C = op(A)·op(B) for row-major matrices: A is m×k
// as op(A), B k×n, C m×n with leading dimensions lda, ldb, ldc (in
// elements, as stored), batch ≥ 1 products at element strides sa, sb, sc.
// cuBLAS is column-major, so it is asked for Cᵀ = op(B)ᵀ·op(A)ᵀ.
func (b *blasHandle) gemmRowMajor(transA, transB bool, m, n, k int, a cu.DevicePtr, lda int, sa int64,
	bp cu.DevicePtr, ldb int, sb int64, c cu.DevicePtr, ldc int, sc int64, batch int, dt int, prec Precision) error {
	return b.gemmRowMajorBeta(transA, transB, m, n, k, a, lda, sa, bp, ldb, sb, c, ldc, sc, batch, dt, prec, 0)
}

// gemmRowMajorBeta is gemmRowMajor computing C = op(A)·op(B) + beta·C
// (beta 1: MatMulAdd's accumulation into C).
func (b *blasHandle) gemmRowMajorBeta(transA, transB bool, m, n, k int, a cu.DevicePtr, lda int, sa int64,
	bp cu.DevicePtr, ldb int, sb int64, c cu.DevicePtr, ldc int, sc int64, batch int, dt int, prec Precision, beta float32) error {
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		return errors.New("cuda: gemm with k = 0 (the caller zeroes C)")
	}
	opA, opB := C.int(blasOpN), C.int(blasOpN)
	if transA {
		opA = blasOpT
	}
	if transB {
		opB = blasOpT
	}
	compute := C.int(computeF32)
	mode := C.int(mathPedantic)
	if dt == dataF32 {
		switch prec {
		case High:
			compute, mode = computeF32TF32, mathTF32
		case Medium:
			compute, mode = computeF32FastBF, mathDefault
		}
	} else {
		mode = mathDefault
	}
	if err := blasCheck("cublasSetMathMode", C.esper_blas_set_math_mode(b.h, mode)); err != nil {
		return err
	}
	t := C.int(dt)
	if batch == 1 {
		return blasCheck("cublasGemmEx", C.esper_blas_gemm(b.h, opB, opA, C.int(n), C.int(m), C.int(k), 1,
			C.uint64_t(bp), t, C.int(ldb), C.uint64_t(a), t, C.int(lda), C.float(beta), C.uint64_t(c), t, C.int(ldc), compute))
	}
	return blasCheck("cublasGemmStridedBatchedEx", C.esper_blas_gemm_batched(b.h, opB, opA, C.int(n), C.int(m), C.int(k), 1,
		C.uint64_t(bp), t, C.int(ldb), C.longlong(sb), C.uint64_t(a), t, C.int(lda), C.longlong(sa), C.float(beta),
		C.uint64_t(c), t, C.int(ldc), C.longlong(sc), C.int(batch), compute))
}
