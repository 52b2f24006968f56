//go:build !amd64 || purego

package cpu

import "github.com/esper-go/esper/tensor"

// packAFast packs nothing on this build: packA's loops do it all.
func packAFast[F tensor.Float](dst, a []F, lda, ic, pc, mb, kb, mr int) int { return 0 }

// packBFast packs nothing on this build: packB's loops do it all.
func packBFast[F tensor.Float](dst, b []F, ldb int, trans bool, pc, jc, kb, nb, nr int) int {
	return 0
}
