package toolsearch

import (
	"fmt"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Check validates a search request the same way on every front door (bus,
// REST) and fills in the default limit.
func Check(in *model.ToolsSearchRequest) error {
	in.Query = strings.TrimSpace(in.Query)
	switch {
	case in.Query == "":
		return apierr.Invalid("query", "query is required")
	case len(in.Query) > model.ToolsSearchMaxQuery:
		return apierr.Invalid("query", fmt.Sprintf("query is longer than %d bytes", model.ToolsSearchMaxQuery))
	case in.Limit < 0 || in.Limit > model.ToolsSearchMaxLimit:
		return apierr.Invalid("limit", fmt.Sprintf("limit must be between 0 and %d", model.ToolsSearchMaxLimit))
	case in.Limit == 0:
		in.Limit = model.ToolsSearchDefaultLimit
	}
	return nil
}
