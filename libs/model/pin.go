package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Pin policies of a server's tool definitions (McpConfig.Pin). The first
// definition of each tool is pinned (a hash of its canonical JSON); a later
// list with another definition — after a restart, a list_changed, a new
// package version — is a change:
//   - strict: the changed tool is withheld (out of every list, its calls
//     refused) until an operator approves it (`mcpbus tools review`); so is
//     a tool that appears once the server's tools were pinned (a rename, an
//     addition), pinned from nothing;
//   - warn: it goes through, re-pinned, and a tool_changed event says so;
//   - off: definitions are not pinned.
const (
	PinStrict = "strict"
	PinWarn   = "warn"
	PinOff    = "off"
)

// PinPolicies lists the valid values of McpConfig.Pin.
var PinPolicies = []string{PinStrict, PinWarn, PinOff}

// PinPolicy is c's policy: its pin, else strict for a server installed from
// a registry (someone else's code, reviewed once) and warn for the others.
func (c *McpConfig) PinPolicy() string {
	if c.Pin != "" {
		return c.Pin
	}
	if c.FromRegistry() {
		return PinStrict
	}
	return PinWarn
}

// FromRegistry reports whether c was installed from a registry (official,
// Smithery): its package or URL is someone else's word, not the operator's.
func (c *McpConfig) FromRegistry() bool {
	return c.Source.Type != "" && c.Source.Type != SourceManual
}

// ToolPin is the record of one tool's pinned definition (KV mcp_pins, key
// PinKey). Pending holds a definition seen since that differs from it.
type ToolPin struct {
	Server     string          `json:"server"`
	Tool       string          `json:"tool"`
	Hash       string          `json:"hash"`
	Definition json.RawMessage `json:"definition"`
	PinnedAt   time.Time       `json:"pinned_at"`
	Pending    *PinnedChange   `json:"pending,omitempty"`
}

// PinnedChange is a definition that differs from the pinned one.
type PinnedChange struct {
	Hash       string          `json:"hash"`
	Definition json.RawMessage `json:"definition"`
	SeenAt     time.Time       `json:"seen_at"`
}

// PinKey is the KV key of a tool's pin: the server's config id and the
// tool's token (ToolToken), so a rename of the server keeps its pins and a
// server re-created under the same slug starts afresh.
func PinKey(serverID, tool string) string { return serverID + "." + ToolToken(tool) }

// ToolDefinition is the canonical JSON of what a client sees of t — name,
// title, description, input and output schemas, annotations — with object
// keys sorted and no insignificant space, and its SHA-256 (hex).
func ToolDefinition(t Tool) (json.RawMessage, string, error) {
	def := map[string]any{"name": t.Tool}
	if t.Title != "" {
		def["title"] = t.Title
	}
	if t.Description != "" {
		def["description"] = t.Description
	}
	for name, raw := range map[string]json.RawMessage{"inputSchema": t.InputSchema, "outputSchema": t.OutputSchema, "annotations": t.Annotations} {
		if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, "", fmt.Errorf("tool %s: %s: %w", t.Tool, name, err)
		}
		def[name] = v
	}
	out, err := json.Marshal(def) // maps marshal with sorted keys
	if err != nil {
		return nil, "", fmt.Errorf("tool %s: %w", t.Tool, err)
	}
	sum := sha256.Sum256(out)
	return out, hex.EncodeToString(sum[:]), nil
}

// ChangedFields names the top-level members that differ between two
// canonical definitions (title, description, inputSchema, …).
func ChangedFields(old, cur json.RawMessage) []string {
	var a, b map[string]json.RawMessage
	_ = json.Unmarshal(old, &a)
	_ = json.Unmarshal(cur, &b)
	out := []string{} // never null in an event: a pin whose hash alone differs (damaged) changed nothing named
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ToolChangedEvent is published on events.tool_changed.<server> when a
// tool's definition differs from its pin: which fields changed, under which
// policy, and whether the tool is withheld. Pending is the new definition.
type ToolChangedEvent struct {
	Server     string          `json:"server"`
	Tool       string          `json:"tool"`
	Policy     string          `json:"policy"`
	PinnedHash string          `json:"pinned_hash"`
	NewHash    string          `json:"new_hash"`
	Changed    []string        `json:"changed"`
	Withheld   bool            `json:"withheld"`
	Pinned     json.RawMessage `json:"pinned"`
	Pending    json.RawMessage `json:"pending"`
	At         time.Time       `json:"at"`
}

// ToolsReviewRequest is the body of mcp.v1.tools.review: the tools whose
// definition changed since it was pinned (of one server, or all).
type ToolsReviewRequest struct {
	Server string `json:"server,omitempty"`
}

// ToolsReviewReply lists them, each with its pinned and pending definition.
type ToolsReviewReply struct {
	Changes []ToolPin `json:"changes"`
}

// ToolsApproveRequest is the body of mcp.v1.tools.approve: approve (pin) the
// pending definition whose hash is Hash, or Reject it (the tool stays
// withheld while the server offers it).
type ToolsApproveRequest struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	Hash   string `json:"hash"`
	Reject bool   `json:"reject,omitempty"`
}

// Decisions of a review (ToolReviewedEvent.Decision).
const (
	PinApproved = "approved"
	PinRejected = "rejected"
)

// ToolReviewedEvent is published on events.tool_reviewed.<server> when a
// pending definition is approved (re-pinned) or rejected on tools.approve
// (the CLI, REST, the console): who decided, and the pinned hash before
// and the pending one decided on.
type ToolReviewedEvent struct {
	Server     string    `json:"server"`
	Tool       string    `json:"tool"`
	Decision   string    `json:"decision"`
	Principal  string    `json:"principal"`
	PinnedHash string    `json:"pinned_hash"`
	NewHash    string    `json:"new_hash"`
	At         time.Time `json:"at"`
}
