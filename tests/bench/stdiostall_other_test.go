//go:build !linux

package bench

func pipeQueues(int) string { return "pipe queues: only on Linux\n" }
