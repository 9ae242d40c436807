package jaegertest

import (
	"testing"

	"github.com/mcpbus/mcpbus/libs/internal/toolbuild/toolbuildtest"
)

func TestChildDiesWithTestProcess(t *testing.T) {
	skipShort(t)
	toolbuildtest.ChildDiesWithTestProcess(t, "jaeger", BuildTimeout+StartTimeout, startChild)
}
