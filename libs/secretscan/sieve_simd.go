//go:build goexperiment.simd && amd64

package secretscan

import "simd/archsimd"

// sieveAvailable reports whether this CPU runs the vector sieve: AVX-512
// with VBMI's byte permutes (VPERMB, VPERMI2B). AVX512 (F, CD, BW, DQ, VL)
// is asked as well: the byte compares are BW's, and the runtime saves the
// 512-bit registers across an asynchronous preemption only when it is set.
// GODEBUG=cpu.avx512f=off clears it and leaves VBMI set; the sieve's
// tables, held in those registers through its loop, were then cut to their
// low 256 bits by a preemption, and keywords and known values were missed.
func sieveAvailable() bool { return archsimd.X86.AVX512() && archsimd.X86.AVX512VBMI() }

// sieveBlocks sieves n blocks of 64 positions from base into run (b
// holds at least 65 bytes from each block); quotes are looked for only
// when asked.
func (p *prefilter) sieveBlocks(b []byte, base, n int, quotes bool, run *sieveBlocks) {
	s := p.sieve
	load := func(t *[128]uint8) (archsimd.Uint8x64, archsimd.Uint8x64) {
		return archsimd.LoadUint8x64((*[64]uint8)(t[:64])), archsimd.LoadUint8x64((*[64]uint8)(t[64:]))
	}
	first0, first1 := load(&s.first)
	bit0, bit1 := load(&s.bit)
	fold := archsimd.BroadcastUint8x64(0x5f)
	f0, f1 := load((*[128]uint8)(&s.firsts))
	s0, s1 := load((*[128]uint8)(&s.seconds))
	t0, t1 := load((*[128]uint8)(&s.thirds))
	k0, k1 := load((*[128]uint8)(&s.shorts))
	white := archsimd.LoadUint8x64(&s.white)
	quote := archsimd.BroadcastUint8x64('"')
	run.n = n
	for k := range n {
		at := base + k*64
		v0 := archsimd.LoadUint8x64Slice(b[at:])   // each position's byte
		v1 := archsimd.LoadUint8x64Slice(b[at+1:]) // and the next
		idx := first0.ConcatPermute(first1, v0).Xor(v1.And(fold))
		bit := bit0.ConcatPermute(bit1, v0)
		// A keyword's later pairs are at the next positions; those past the
		// block's end are not known here, so they may be.
		firsts, seconds, thirds := in(f0, f1, idx, bit), in(s0, s1, idx, bit)>>1|1<<63, in(t0, t1, idx, bit)>>2|3<<62
		run.cands[k] = in(k0, k1, idx, bit) | firsts&seconds&thirds
		// A whitespace byte is the entry of its low six bits in white.
		run.white[k] = v0.Equal(white.Permute(v0)).ToBits()
		if quotes {
			run.quotes[k] = v0.Equal(quote).ToBits()
		}
	}
}

// in tells which positions' pairs (by their byte idx and bit in a set) are
// in the set t0:t1.
func in(t0, t1, idx, bit archsimd.Uint8x64) uint64 {
	return t0.ConcatPermute(t1, idx).And(bit).NotEqual(archsimd.BroadcastUint8x64(0)).ToBits()
}

// delims tells which of the 64 bytes from b[0] end a token (classes not 0).
func (s *sieveSets) delims(b []byte) uint64 {
	v := archsimd.LoadUint8x64Slice(b)
	t0 := archsimd.LoadUint8x64((*[64]uint8)(s.delim[:64]))
	t1 := archsimd.LoadUint8x64((*[64]uint8)(s.delim[64:]))
	ascii := v.Less(archsimd.BroadcastUint8x64(0x80))
	return t0.ConcatPermute(t1, v).NotEqual(archsimd.BroadcastUint8x64(0)).And(ascii).ToBits()
}
