//go:build amd64 && !purego

package cpu

import (
	"unsafe"

	"github.com/esper-go/esper/tensor"
	"golang.org/x/sys/cpu"
)

// packAVX512 reports whether the AVX-512 packing routines may run.
var packAVX512 = cpu.X86.HasAVX512F && useAVX512

// packA12AVX512 packs 16·chunks columns of a 12-row block of row-major A
// (row stride lda) into a panel, 12 values per column.
//
//go:noescape
func packA12AVX512(chunks int, src *float32, lda int, dst *float32)

// packB32AVX512 copies a kb×(32·panels) block of row-major B (row stride
// ldb) into panels of 32 columns.
//
//go:noescape
func packB32AVX512(kb, panels int, src *float32, ldb int, dst *float32)

// packT32AVX512 packs 16·chunks columns of a 32-row block of a row-major
// matrix (row stride ld) into a panel, 32 values per column.
//
//go:noescape
func packT32AVX512(chunks int, src *float32, ld int, dst *float32)

// packAFast packs the full 12-row panels of a row-major float32 A block
// (rows ic.., columns pc..pc+kb) with packA12AVX512 (the last kb mod 16
// columns in Go), and returns how many rows it packed (a multiple of 12;
// 0 where it does not apply: another element type, panel height or CPU).
func packAFast[F tensor.Float](dst, a []F, lda, ic, pc, mb, kb, mr int) int {
	full := mb / 12 * 12
	if mr != 12 || !packAVX512 || unsafe.Sizeof(a[0]) != 4 || full == 0 || kb == 0 {
		return 0
	}
	k16 := kb / 16 * 16
	for ir := 0; ir < full; ir += 12 {
		base := (ic+ir)*lda + pc
		_ = a[base+11*lda+kb-1]
		pan := dst[ir*kb : (ir+12)*kb]
		if k16 > 0 {
			packA12AVX512(k16/16, (*float32)(unsafe.Pointer(&a[base])), lda, (*float32)(unsafe.Pointer(&pan[0])))
		}
		for i := range 12 {
			for p, v := range a[base+i*lda+k16 : base+i*lda+kb] {
				pan[(k16+p)*12+i] = v
			}
		}
	}
	return full
}

// packBFast packs the full 32-column panels of a float32 B block (rows
// pc..pc+kb, columns jc.. of op(B)) with the AVX-512 routines: row by row
// when B is stored as op(B) (packB32AVX512), transposed in registers when
// it is stored as op(B)ᵀ (packT32AVX512, the last kb mod 16 in Go). It
// returns how many columns it packed (a multiple of 32; 0 where it does
// not apply).
func packBFast[F tensor.Float](dst, b []F, ldb int, trans bool, pc, jc, kb, nb, nr int) int {
	panels := nb / 32
	if nr != 32 || !packAVX512 || unsafe.Sizeof(b[0]) != 4 || panels == 0 || kb == 0 {
		return 0
	}
	if !trans {
		base := pc*ldb + jc
		_ = b[base+(kb-1)*ldb+32*panels-1]
		_ = dst[32*panels*kb-1]
		packB32AVX512(kb, panels, (*float32)(unsafe.Pointer(&b[base])), ldb, (*float32)(unsafe.Pointer(&dst[0])))
		return 32 * panels
	}
	k16 := kb / 16 * 16
	for q := 0; q < panels; q++ {
		base := (jc+32*q)*ldb + pc // row jc+32q of the stored [n, k] matrix
		_ = b[base+31*ldb+kb-1]
		pan := dst[32*q*kb : 32*(q+1)*kb]
		if k16 > 0 {
			packT32AVX512(k16/16, (*float32)(unsafe.Pointer(&b[base])), ldb, (*float32)(unsafe.Pointer(&pan[0])))
		}
		for i := range 32 {
			for p, v := range b[base+i*ldb+k16 : base+i*ldb+kb] {
				pan[(k16+p)*32+i] = v
			}
		}
	}
	return 32 * panels
}
