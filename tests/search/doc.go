// Package search measures tool search over real tools: the tools/list of the
// npm servers pinned in tests/npm, recorded in testdata/npm-tools.json (a
// test re-checks the recording against the live servers), and a fixed set
// of (query, expected tool) pairs whose recall@5 must stay at or above 0.9.
package search
