package console_test

import (
	"testing"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

// The go-sdk test server and the mcpbus command the flows run, built at once
// before the test.
var testServer, mcpbusBin string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer, testkit.WithBinary(&mcpbusBin, testkit.BuildCommand("mcpbus", "./tools/mcpbus")))
}
