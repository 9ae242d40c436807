package runner

// SetRawCalls turns the raw tools/call path on or off, for tests and
// benchmarks that compare it with go-sdk's path in one process.
func SetRawCalls(on bool) { sdkOnly.Store(!on) }
