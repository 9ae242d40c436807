// Command gendocs writes the mcpbus CLI reference (make docs):
// go run ./tools/mcpbus/internal/gendocs docs/cli
package main

import (
	"fmt"
	"os"

	"github.com/mcpbus/mcpbus/tools/mcpbus/internal/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendocs <dir>")
		os.Exit(2)
	}
	if err := cli.WriteDocs(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}
