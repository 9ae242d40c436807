//go:build race

package cluster

// raceDetector: the race detector slows every service several times.
const raceDetector = true
