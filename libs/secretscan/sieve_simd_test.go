//go:build goexperiment.simd && amd64

package secretscan

import (
	"os"
	"os/exec"
	"simd/archsimd"
	"testing"
)

// The sieve runs only where the runtime keeps its 512-bit registers across
// a preemption (archsimd's AVX512): with AVX-512 turned off by GODEBUG on a
// CPU with VBMI, VBMI alone still reported it, and a preemption in the
// sieve's loop lost keywords and known values. The test runs itself again
// with AVX-512 off.
func TestSieveNeedsAVX512State(t *testing.T) {
	if os.Getenv("SECRETSCAN_SIEVE_CHILD") == "1" {
		if sieveAvailable() && !archsimd.X86.AVX512() {
			t.Fatal("the sieve is available though the runtime does not save AVX-512 registers on preemption")
		}
		return
	}
	if !archsimd.X86.AVX512VBMI() {
		t.Skip("no AVX-512 VBMI on this CPU: nothing to turn off")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSieveNeedsAVX512State$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SECRETSCAN_SIEVE_CHILD=1", "GODEBUG=cpu.avx512f=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("with GODEBUG=cpu.avx512f=off: %v\n%s", err, out)
	}
}
