package secretscan

import "math/bits"

// The sieve lets the walk skip, 64 positions at a time, the bytes where
// nothing can happen: where no keyword starts and (with known values) no
// quote is and no whitespace ends a long word. The straight loop looks at
// every position (20-25 instructions a byte); with vector instructions
// (sieve_simd.go: AVX-512 VBMI through Go's simd/archsimd, built with
// GOEXPERIMENT=simd) a block of 64 positions is sieved in some 25, and the
// walk visits only the positions the sieve leaves; a long word's tokens
// are found 64 bytes a step too (delims). Without them (another CPU,
// another build) the walk is the straight loop alone, with the same
// findings.
//
// A position may start a keyword of four bytes or more only if its byte
// pair, in any case, is the first pair of a keyword (firsts), the next
// position's the second pair of one (seconds) and the one after's the
// third (thirds); a keyword of two or three bytes only if its pair is
// the first of such a keyword (shorts). Each set is 1,024 bits of hashed
// pairs: a position the sieve leaves is a candidate the walk checks as
// before (the four-byte bitset and the keywords compared), so the sieve
// changes no finding, only how many positions are looked at.
type sieveSets struct {
	firsts, seconds, thirds, shorts pairSet
	// The pair hash's tables, by the first byte's low seven bits (bytes
	// beyond ASCII share their entries: more candidates, none lost), an
	// upper case letter's entries its lower case's: a pair's byte in a
	// set is first[a] ^ (c & 0x5f), which folds c's case, its bit bit[a].
	first, bit [128]uint8
	// white has each whitespace byte at its low six bits, elsewhere a byte
	// whose low six bits are not the entry's: a byte is whitespace if it
	// is the entry of its low six bits.
	white [64]uint8
	// delim is 1 at each ASCII byte that ends a token (classes: a
	// delimiter or whitespace), 0 elsewhere; no byte beyond ASCII does.
	delim [128]uint8
}

// pairSet is 1,024 bits, as 128 bytes: what one vector permute holds.
type pairSet [128]uint8

func newSieveSets() *sieveSets {
	s := &sieveSets{}
	x := uint64(0x9e3779b97f4a7c15) // any fixed seed: the sets are built with the same tables
	for c := range s.first {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		s.first[c], s.bit[c] = uint8(x>>32)&127, 1<<(x>>61)
	}
	for c := 'A'; c <= 'Z'; c++ {
		s.first[c], s.bit[c] = s.first[c+'a'-'A'], s.bit[c+'a'-'A']
	}
	for i := range s.white {
		s.white[i] = byte(i) ^ 1
	}
	for c := range 256 {
		if classes[c] == space {
			s.white[c%64] = byte(c)
		}
		if c < 128 && classes[c] != 0 {
			s.delim[c] = 1
		}
	}
	return s
}

// hash is a pair's byte in a set and its bit's mask.
func (s *sieveSets) hash(a, c byte) (uint8, uint8) {
	return s.first[a&127] ^ c&0x5f, s.bit[a&127]
}

func (s *sieveSets) add(set *pairSet, a, c byte) {
	i, bit := s.hash(a, c)
	set[i] |= bit
}

func (s *sieveSets) has(set *pairSet, a, c byte) bool {
	i, bit := s.hash(a, c)
	return set[i]&bit != 0
}

// addKeyword puts a lowercase keyword of two bytes or more in the sets.
func (s *sieveSets) addKeyword(k string) {
	if len(k) < 4 {
		s.add(&s.shorts, k[0], k[1])
		return
	}
	s.add(&s.firsts, k[0], k[1])
	s.add(&s.seconds, k[1], k[2])
	s.add(&s.thirds, k[2], k[3])
}

// sieveRun is how many blocks of 64 positions are sieved at once (the
// vector code loads its tables once a run).
const sieveRun = 16

// sieveBlocks is what the vector code reports of a run of blocks: by block,
// the candidates that may start a keyword, the whitespace and the quotes
// (bit j for the block's position j).
type sieveBlocks struct {
	n                    int // blocks in the run
	cands, white, quotes [sieveRun]uint64
}

// sieve is one walk's state: the run of blocks last sieved and what it left.
type sieve struct {
	run   sieveBlocks
	stops [sieveRun]uint64 // by block, where the walk stops for known values
}

// sieveMin is the shortest payload worth a sieve: one block and the three
// bytes after it (the four bytes from its last position are read).
const sieveMin = 67

// sieved walks the payload's blocks with the sieve, as long as sieveMin
// bytes are left, doing at each position what the straight loop does where
// it stops: keywords compared where the four-byte bitset (or the two-byte
// keywords) may have one, a quote or the whitespace ending a long word
// handled (with known values: long is the walk's mask of a long word's
// end, 0 without). It returns where the straight loop goes on, and m there.
func (w *walker) sieved(long uint64) (int, uint64) {
	p, b := w.p, w.b
	var s sieve
	var prior uint64 // whitespace among the 64 bytes before i (bit 63 the last)
	i := 0
	for ; i+sieveMin <= len(b); i += s.run.n * 64 {
		s.fill(p, b, i, prior, long)
		for k := range s.run.n {
			base := i + k*64
			// Keywords and known values are apart (hits, findings), so each
			// has a loop of its own: fewer branches to mispredict.
			for left := s.run.cands[k]; left != 0; left &= left - 1 {
				j := base + bits.TrailingZeros64(left)
				x := uint32(b[j]) | uint32(b[j+1])<<8 | uint32(b[j+2])<<16 | uint32(b[j+3])<<24
				if h := gramHash(x); p.grams[h/64]&(1<<(h%64)) != 0 || p.pairs[uint16(x)]&short != 0 {
					w.keywords(j)
				}
			}
			for left := s.stops[k]; left != 0; left &= left - 1 {
				o := uint(bits.TrailingZeros64(left))
				w.stop(base+int(o), s.after(base, k, o, prior))
			}
		}
		prior = s.run.white[s.run.n-1]
	}
	return i, bits.Reverse64(prior)
}

// after is where a word ending before position o of block k (from base)
// starts, if whitespace is among the bytes of the block before it or the
// 64 before the block (prior for the first of the run): after the last;
// else -1.
func (s *sieve) after(base, k int, o uint, prior uint64) int {
	if k > 0 {
		prior = s.run.white[k-1]
	}
	if wb := s.run.white[k] & (1<<o - 1); wb != 0 {
		return base + 64 - bits.LeadingZeros64(wb)
	}
	if prior != 0 {
		return base - bits.LeadingZeros64(prior)
	}
	return -1
}

// fill sieves a run of blocks from base, prior the whitespace among the
// 64 bytes before it.
func (s *sieve) fill(p *prefilter, b []byte, base int, prior, long uint64) {
	n := min(sieveRun, (len(b)-3-base)/64)
	p.sieveBlocks(b, base, n, long != 0, &s.run)
	if long == 0 {
		s.stops = [sieveRun]uint64{}
		return
	}
	// Quotes, and whitespace ending a word as long as the shortest known
	// value: none among the l bytes before it.
	l := uint(bits.Len64(long) - 1)
	for k := range n {
		before := prior
		if k > 0 {
			before = s.run.white[k-1]
		}
		s.stops[k] = s.run.quotes[k]
		if white := s.run.white[k]; white != 0 {
			s.stops[k] |= white &^ runBefore(before, white, l)
		}
	}
}

// runBefore returns, for each position of a block (white its whitespace,
// prior the 64 bytes' before it), whether whitespace is among the l
// (1-63) bytes before it.
func runBefore(prior, white uint64, l uint) uint64 {
	// Over the 128 bits prior:white, or in the bytes 1..c before, doubling c.
	lo, hi := prior<<1, white<<1|prior>>63
	c := uint(1)
	for 2*c <= l {
		lo, hi = lo|lo<<c, hi|hi<<c|lo>>(64-c)
		c *= 2
	}
	if d := l - c; d > 0 {
		hi |= hi<<d | lo>>(64-d)
	}
	return hi
}
