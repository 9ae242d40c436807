package runner

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/schemaguard"
	"github.com/mcpbus/mcpbus/libs/toolargs"
)

// Arguments are checked against the tool's input schema before they reach
// the server, so a bus caller gets the same answer as a /mcp client: a tool
// result with isError and the message of libs/toolargs (SEP-1303), whatever
// words (or JSON-RPC error) the server itself would have used.

// schemaCache keeps the compiled input schema of each tool, by the tool
// value a session listed (a new listing makes new values). Bounded: it
// starts over when full.
type schemaCache struct {
	mu sync.Mutex
	m  map[*mcp.Tool]toolSchema
}

// toolSchema is what the cache knows of a tool's input schema.
type toolSchema struct {
	rs *schemaguard.Schema // nil: not checkable here
	// headers: the schema binds arguments to HTTP headers (x-mcp-header,
	// SEP-2243), which only go-sdk's requests send.
	headers bool
	// digest is the SHA-256 of the schema's JSON, as the tool's catalog
	// entry carries it (publish.go): what a gateway in this process
	// vouches with (bus.VouchArguments).
	digest [sha256.Size]byte
	// out is the compiled output schema (outputschema.go); nil when the
	// tool declares none (declaresOutput false) or it cannot be compiled here.
	out            *schemaguard.Schema
	declaresOutput bool
}

const schemaCacheMax = 4096

// resolved compiles t's input schema on first use; nil when it cannot be
// compiled here (the server still validates).
func (c *schemaCache) resolved(t *mcp.Tool) *schemaguard.Schema { return c.entry(t).rs }

// bindsHeaders reports whether t's schema binds arguments to HTTP headers.
func (c *schemaCache) bindsHeaders(t *mcp.Tool) bool { return c.entry(t).headers }

func (c *schemaCache) entry(t *mcp.Tool) toolSchema {
	c.mu.Lock()
	e, ok := c.m[t]
	c.mu.Unlock()
	if ok {
		return e
	}
	if raw, err := json.Marshal(t.InputSchema); err == nil {
		e.headers = bytes.Contains(raw, []byte(`"x-mcp-header"`))
		e.digest = sha256.Sum256(raw)
		// A schema that would send the validator into endless (fatal) or
		// exponential recursion is the server's to check (schemaguard).
		e.rs, _ = schemaguard.Resolve(raw)
	}
	if t.OutputSchema != nil {
		if raw, err := json.Marshal(t.OutputSchema); err == nil && string(raw) != "null" {
			e.declaresOutput = true
			e.out, _ = schemaguard.Resolve(raw)
		}
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= schemaCacheMax {
		c.m = map[*mcp.Tool]toolSchema{}
	}
	c.m[t] = e
	c.mu.Unlock()
	return e
}

// check returns the refusal of args (a JSON object, checked by checkArgs)
// for t, nil when they fit its schema or it cannot be checked. vouched is
// the digest of the schema a requester in this process checked them
// against already (nil: none); when it is t's, the same check with the same
// validator is not made twice.
func (c *schemaCache) check(t *mcp.Tool, args []byte, vouched *[sha256.Size]byte) *apierr.Error {
	e := c.entry(t)
	if e.rs == nil || vouched != nil && *vouched == e.digest {
		return nil
	}
	rs := e.rs
	var v any
	if json.Unmarshal(args, &v) != nil {
		return nil // checkArgs refused it already
	}
	// Arguments too costly to check against the schema (schemaguard.ErrCostly)
	// are left to the server, as a schema mcpbus cannot check is.
	if err := rs.Validate(v); err != nil && !errors.Is(err, schemaguard.ErrCostly) {
		return toolargs.Mismatch(t.Name, err)
	}
	return nil
}
