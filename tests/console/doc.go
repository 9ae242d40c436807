// Package console runs the web console's browser flows (tests/console/e2e,
// playwright-core driving Debian's chromium) against a real `mcpbus up` with
// local stand-ins for the registries and the LLM.
//
// Needs `make console` (the built app, embedded in the mcpbus binary the test
// builds), `make npm-deps` (playwright-core and the pinned MCP servers) and
// /usr/bin/chromium (or MCPBUS_CHROMIUM). Without chromium or playwright-core
// the test skips, unless CI=true: then it fails.
package console
