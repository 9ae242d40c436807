package vaulttest

import (
	"testing"

	"github.com/mcpbus/mcpbus/libs/internal/toolbuild/toolbuildtest"
)

func TestChildDiesWithTestProcess(t *testing.T) {
	toolbuildtest.ChildDiesWithTestProcess(t, "vaultdev", BuildTimeout+StartTimeout, startChild)
}
