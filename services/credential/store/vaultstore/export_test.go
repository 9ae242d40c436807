package vaultstore

import "time"

// SetReloginEvery changes the least time between two logins that a plain
// "permission denied" brings about (tests wait less than the default).
func SetReloginEvery(s *Store, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloginEvery = d
}
