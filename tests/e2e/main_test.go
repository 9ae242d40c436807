package e2e

import (
	"testing"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

// The go-sdk test server and the mcpbus command, each built once for all
// the tests (a link of mcpbus takes seconds; a dozen tests run it). The tests
// run in parallel (they mostly wait on processes): each has its own temp
// dirs, and every mcpbus up binds free ports it reports (clitest.StartUp).
var testServer, mcpbusBin string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer, testkit.WithBinary(&mcpbusBin, testkit.BuildCommand("mcpbus", "./tools/mcpbus")))
}
