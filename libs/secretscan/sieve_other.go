//go:build !(goexperiment.simd && amd64)

package secretscan

// sieveAvailable: this build has no vector sieve (it needs amd64 and
// GOEXPERIMENT=simd); the walk is the straight loop alone.
func sieveAvailable() bool { return false }

func (p *prefilter) sieveBlocks([]byte, int, int, bool, *sieveBlocks) {
	panic("secretscan: no vector sieve in this build")
}

func (s *sieveSets) delims([]byte) uint64 {
	panic("secretscan: no vector sieve in this build")
}
