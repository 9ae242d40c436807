package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Approvals of tool calls, for any MCP client and on the bus (issue 30):
// rules say per tool and caller whether a call goes through, is refused or
// waits for a person's approval (a HeldCall in KV). One engine
// (libs/approvals) applies them at the gateway, in the chat (a profile's
// rules, ApprovalPolicy.EngineRules) and in the runners.

// DefaultApprovalTimeout is how long a held call waits when the rules set none.
const DefaultApprovalTimeout = 2 * time.Minute

// MaxApprovalTimeout bounds ApprovalRules.TimeoutSeconds (a held HTTP
// request must not outlive every proxy in front of the gateway).
const MaxApprovalTimeout = 30 * time.Minute

// ApprovalRules are an approval policy: the first rule whose tool
// and principal globs both match a call decides; none matching, Default
// (empty: allow, so a deployment without rules behaves as before).
type ApprovalRules struct {
	Default string                `json:"default,omitempty"`
	Rules   []GatewayApprovalRule `json:"rules,omitempty"`
	// TimeoutSeconds bounds the wait of a held call (0: 120); then it is
	// denied (fail closed).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// GatewayApprovalRule is one rule. Tool is a glob on <server>__<tool>,
// Principal one on the caller's principal id (key:<id>, oauth:<issuer>#<sub>;
// empty: anyone); in both '*' matches any run of characters. Approvers are
// principal ids (or globs) who may decide the calls this rule holds, besides
// admins.
type GatewayApprovalRule struct {
	Tool      string   `json:"tool"`
	Principal string   `json:"principal,omitempty"`
	Decision  string   `json:"decision"`
	Approvers []string `json:"approvers,omitempty"`
}

// Timeout is how long a held call waits.
func (r ApprovalRules) Timeout() time.Duration {
	if r.TimeoutSeconds <= 0 {
		return DefaultApprovalTimeout
	}
	return time.Duration(r.TimeoutSeconds) * time.Second
}

// Decide is the decision for a call of tool (namespaced) by principal id,
// and the rule that made it (nil: the default).
func (r ApprovalRules) Decide(tool, principal string) (string, *GatewayApprovalRule) {
	return r.DecideNames([]string{tool}, principal)
}

// DecideNames is Decide for a tool known by several names (ToolNames): the
// first rule whose tool glob matches any of them decides.
func (r ApprovalRules) DecideNames(names []string, principal string) (string, *GatewayApprovalRule) {
	for i := range r.Rules {
		rule := &r.Rules[i]
		if slices.ContainsFunc(names, func(n string) bool { return Glob(rule.Tool, n) }) && (rule.Principal == "" || Glob(rule.Principal, principal)) {
			return rule.Decision, rule
		}
	}
	if r.Default == "" {
		return ApprovalAllow, nil
	}
	return r.Default, nil
}

// Validate checks the rules (VALIDATION_ERROR naming the field).
func (r ApprovalRules) Validate() *apierr.Error {
	okDecision := func(d string) bool { return d == ApprovalAllow || d == ApprovalAsk || d == ApprovalDeny }
	if r.Default != "" && !okDecision(r.Default) {
		return apierr.Invalid("default", "default must be allow, ask or deny")
	}
	if r.TimeoutSeconds < 0 || time.Duration(r.TimeoutSeconds)*time.Second > MaxApprovalTimeout {
		return apierr.Invalid("timeout_seconds", fmt.Sprintf("timeout_seconds must be between 0 (default %s) and %d", DefaultApprovalTimeout, int(MaxApprovalTimeout.Seconds())))
	}
	if len(r.Rules) > MaxChatGlobs {
		return apierr.Invalid("rules", fmt.Sprintf("at most %d rules", MaxChatGlobs))
	}
	for i, rule := range r.Rules {
		field := fmt.Sprintf("rules.%d", i)
		if rule.Tool == "" || len(rule.Tool) > 256 || !validGlob(rule.Tool) {
			return apierr.Invalid(field+".tool", "tool must be a glob on <server>__<tool> of 1 to 256 bytes")
		}
		if len(rule.Principal) > 512 || !validGlob(rule.Principal) {
			return apierr.Invalid(field+".principal", "principal must be a glob of at most 512 bytes")
		}
		if !okDecision(rule.Decision) {
			return apierr.Invalid(field+".decision", "decision must be allow, ask or deny")
		}
		if len(rule.Approvers) > 64 {
			return apierr.Invalid(field+".approvers", "at most 64 approvers")
		}
		for j, a := range rule.Approvers {
			if a == "" || len(a) > 512 || !validGlob(a) {
				return apierr.Invalid(fmt.Sprintf("%s.approvers.%d", field, j), "an approver is a principal id or glob of 1 to 512 bytes")
			}
		}
	}
	return nil
}

// Glob reports whether s matches pattern, where '*' matches any run of
// characters (slashes too: principal ids hold issuer URLs) and every other
// character itself. A pattern with '?', '[' or '\\' is a path.Match pattern
// (where '*' stops at a slash), as the chat profiles' rules always were:
// they are rules of this engine too (ApprovalPolicy.EngineRules), and tool names
// have no slash, so '*' means the same in both.
func Glob(pattern, s string) bool {
	if strings.ContainsAny(pattern, pathMeta) {
		ok, _ := path.Match(pattern, s)
		return ok
	}
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// pathMeta are the characters that make a glob a path.Match pattern.
const pathMeta = "?[\\"

// validGlob reports whether a path.Match pattern is well formed (a plain
// '*' glob always is).
func validGlob(pattern string) bool {
	if !strings.ContainsAny(pattern, pathMeta) {
		return true
	}
	_, err := path.Match(pattern, "")
	return err == nil
}

// Decisions of a held call.
const (
	HeldPending  = "pending"
	HeldApproved = "approved"
	HeldDenied   = "denied"
)

// HeldCall is a call waiting for approval (KV mcp_approvals, held.<id>): it
// binds the caller, the tool and the hash of the canonical arguments, so an
// approval releases exactly this call.
type HeldCall struct {
	ID        string `json:"id"`
	Principal string `json:"principal"`
	Server    string `json:"server"`
	Tool      string `json:"tool"`
	// ServerTool is the tool's name as its server gives it, when the
	// namespaced name differs from <server>__<it> (ToolNames).
	ServerTool string          `json:"server_tool,omitempty"`
	ArgsSHA256 string          `json:"args_sha256"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Approvers  []string        `json:"approvers,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	ExpiresAt  time.Time       `json:"expires_at"`
	Decision   string          `json:"decision"`
	DecidedBy  string          `json:"decided_by,omitempty"`
	DecidedAt  time.Time       `json:"decided_at,omitzero"`
	Reason     string          `json:"reason,omitempty"`
}

// ToolNames are the names the rules match h's tool by (ToolNames).
func (h HeldCall) ToolNames() []string { return ToolNames(h.Tool, h.Server, h.ServerTool) }

// State is the call's decision, a pending call past its expiry being denied.
func (h HeldCall) State(now time.Time) string {
	if h.Decision == HeldPending && !now.Before(h.ExpiresAt) {
		return HeldDenied
	}
	return h.Decision
}

// MayDecide reports whether principal id (admin or not) may decide h.
func (h HeldCall) MayDecide(id string, admin bool) bool {
	if admin {
		return true
	}
	for _, a := range h.Approvers {
		if Glob(a, id) {
			return true
		}
	}
	return false
}

// ApprovalsListReply lists the held calls (pending first, oldest first).
type ApprovalsListReply struct {
	Calls []HeldCall `json:"calls"`
}

// ApprovalDecideRequest approves or denies held call ID.
type ApprovalDecideRequest struct {
	ID       string `json:"id"`
	Decision string `json:"decision"` // approve or deny
	Reason   string `json:"reason,omitempty"`
}

// Validate checks the request.
func (r ApprovalDecideRequest) Validate() *apierr.Error {
	if r.ID == "" || len(r.ID) > 128 {
		return apierr.Invalid("id", "id is required")
	}
	if r.Decision != DecisionApprove && r.Decision != DecisionDeny {
		return apierr.Invalid("decision", "decision must be approve or deny")
	}
	if len(r.Reason) > 1000 {
		return apierr.Invalid("reason", "reason must be at most 1000 bytes")
	}
	return nil
}

// CanonicalArgs is args (a JSON object) with keys sorted at every level and
// no insignificant space, and its SHA-256 (hex): two calls with the same
// arguments written differently hash the same.
func CanonicalArgs(args json.RawMessage) (json.RawMessage, string, error) {
	args = bytes.TrimSpace(args)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber() // numbers keep their digits
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, "", fmt.Errorf("arguments: %w", err)
	}
	out, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return nil, "", fmt.Errorf("arguments: %w", err)
	}
	sum := sha256.Sum256(out)
	return out, hex.EncodeToString(sum[:]), nil
}
