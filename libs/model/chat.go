package model

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// The chat contract (issue 14): profiles, the bodies of mcp.v1.chat.*, the
// events on mcp.v1.events.chat.<conversation> and the entries of the durable
// conversation log (stream MCP_CHAT, subjects <prefix>.chat.log.<conversation>).

// Model providers of a chat profile.
const (
	// ChatProviderOpenAI is any OpenAI-compatible Chat Completions API
	// (OpenAI, Ollama, vLLM, LM Studio, OpenRouter: set base_url).
	ChatProviderOpenAI = "openai"
	// ChatProviderAnthropic is the Anthropic Messages API.
	ChatProviderAnthropic = "anthropic"
)

// Limits of a chat profile.
const (
	// DefaultChatMaxSteps is the model steps of one turn when the profile says nothing.
	DefaultChatMaxSteps = 20
	// MaxChatMaxSteps bounds max_steps.
	MaxChatMaxSteps = 1000
	// MaxChatSystemPrompt bounds the system prompt (bytes).
	MaxChatSystemPrompt = 64 << 10
	// MaxChatMessage bounds one user message (bytes).
	MaxChatMessage = 256 << 10
	// MaxChatGlobs bounds the globs of a tool filter or an approval policy.
	MaxChatGlobs = 256
	// DefaultChatToolBudget is the most tools offered to the model at once
	// when the profile says nothing: a larger catalog is offered as search.
	DefaultChatToolBudget = 64
	// MaxChatToolBudget bounds tool_budget (providers cap tools per
	// request: OpenAI at 128, others higher).
	MaxChatToolBudget = 1024
)

// ChatAPIKeyEnv is the name the profile's API key has in its credential
// record (model.Credentials.Env).
const ChatAPIKeyEnv = "API_KEY"

// chatProfileNamespace derives the credential ids of profiles (uuid v5).
var chatProfileNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://mcpbus.dev/chat/profiles"))

// ChatProfileCredentialID is the credential record (a uuid, as the credential
// service wants) that holds the API key of the profile named name: the same
// on every instance, never the id of a server config (those are v4).
func ChatProfileCredentialID(name string) string {
	return uuid.NewSHA1(chatProfileNamespace, []byte(name)).String()
}

// ValidConversationID reports whether id may name a conversation: a slug or a
// uuid (lower case, digits, '-' and '_', at most 64), so never a subject
// separator or wildcard ('.', '*', '>').
func ValidConversationID(id string) bool { return ValidSlug(id) }

// Profile is a chat profile, stored in the KV bucket mcp_chat_profiles under
// its name. The API key itself is never in it: it lives in the credential
// service under APIKeyRef (ChatProfileCredentialID(Name)).
type Profile struct {
	// Name is the profile's slug.
	Name string `json:"name"`
	// Provider is openai (any Chat Completions API) or anthropic.
	Provider string `json:"provider"`
	Model    string `json:"model"`
	// BaseURL overrides the provider's endpoint (Ollama, vLLM, a proxy…).
	BaseURL string `json:"base_url,omitempty"`
	// APIKeyRef is the credential id holding the key; set by the store.
	APIKeyRef string `json:"api_key_ref,omitempty"`
	// HasAPIKey says whether the credential service holds a key for it; set by the store.
	HasAPIKey    bool   `json:"has_api_key,omitempty"`
	SystemPrompt string `json:"system_prompt,omitempty"`
	// MaxSteps bounds the model steps of one turn (0: DefaultChatMaxSteps).
	MaxSteps int `json:"max_steps,omitempty"`
	// MaxTokensPerTurn bounds the tokens (in + out) of one turn (0: no bound).
	MaxTokensPerTurn int64 `json:"max_tokens_per_turn,omitempty"`
	// MaxTurnDuration bounds the wall time of one turn (0: no bound).
	MaxTurnDuration Duration `json:"max_turn_duration,omitzero"`
	// ToolFilter narrows the catalog offered to the model.
	ToolFilter ChatToolFilter `json:"tool_filter,omitzero"`
	// ToolBudget is the most catalog tools offered to the model at once
	// (0: DefaultChatToolBudget): above it the model is offered
	// search_tools and the tools its searches found.
	ToolBudget int `json:"tool_budget,omitempty"`
	// Approval decides which tool calls run, are asked for, or are refused.
	Approval ApprovalPolicy `json:"approval,omitzero"`
	// Prices, when given, turn token usage into a cost.
	Prices *ChatPrices `json:"prices,omitempty"`
	// Sampling lets the MCP servers called in this profile's turns ask its
	// model for a completion (MCP sampling): "allow", or "deny" (the default).
	Sampling string `json:"sampling,omitempty"`
	// TextToolCalls runs the tool calls a model writes as text in its
	// answer (a <tool_call> tag, a fenced JSON block, or an answer that is
	// only {"name":…,"arguments":…}), as local models without native tool
	// calling do. Off by default: with it, a model that quotes such JSON
	// (from a tool's result, a web page) runs it.
	TextToolCalls bool `json:"text_tool_calls,omitempty"`
	// Owner, when set, is the one principal (libs/principal id, e.g.
	// key:<key id>) who may see and use the profile besides admins; ""
	// shares it with every chat caller.
	Owner     string    `json:"owner,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Revision is the KV revision; a non-zero one on Put must be the current
	// one (optimistic concurrency: else CONFLICT).
	Revision uint64 `json:"revision,omitempty"`
}

// Profile.Sampling values.
const (
	SamplingAllow = "allow"
	SamplingDeny  = "deny"
)

// ChatToolFilter narrows the tools offered to the model: globs (path.Match)
// on the namespaced name <server>__<tool>. With Include set only matching
// tools are offered; tools matching Exclude never are.
type ChatToolFilter struct {
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
}

// IsZero reports whether the filter offers every tool.
func (f ChatToolFilter) IsZero() bool { return len(f.Include) == 0 && len(f.Exclude) == 0 }

// Allows reports whether a tool known by names (ToolNames: the namespaced
// name first) is offered: one of them included, none excluded.
func (f ChatToolFilter) Allows(names ...string) bool { return allows(f.Include, f.Exclude, names) }

// Approval decisions of a policy.
const (
	ApprovalAllow = "allow"
	ApprovalAsk   = "ask"
	ApprovalDeny  = "deny"
)

// ApprovalPolicy decides per tool call: the first rule whose glob matches the
// namespaced tool name wins, else Default (empty: allow).
type ApprovalPolicy struct {
	Default string         `json:"default,omitempty"`
	Rules   []ApprovalRule `json:"rules,omitempty"`
}

// ApprovalRule is one glob (on <server>__<tool>, as Glob reads it) and its decision.
type ApprovalRule struct {
	Tool     string `json:"tool"`
	Decision string `json:"decision"`
}

// IsZero reports whether the policy allows everything.
func (p ApprovalPolicy) IsZero() bool { return p.Default == "" && len(p.Rules) == 0 }

// EngineRules are the policy as rules of the approval engine (ApprovalRules,
// libs/approvals): the same globs in the same order and the same default,
// for whoever sends the turn. A call they ask about is held in KV
// mcp_approvals like any other held call.
func (p ApprovalPolicy) EngineRules() ApprovalRules {
	r := ApprovalRules{Default: p.Default, Rules: make([]GatewayApprovalRule, len(p.Rules))}
	for i, x := range p.Rules {
		r.Rules[i] = GatewayApprovalRule{Tool: x.Tool, Decision: x.Decision}
	}
	return r
}

// Decide is allow, ask or deny for a tool known by names (ToolNames: the
// namespaced name first), by the engine's rules (EngineRules).
func (p ApprovalPolicy) Decide(names ...string) string {
	d, _ := p.EngineRules().DecideNames(names, "")
	return d
}

// ChatPrices are the prices per million tokens (any one currency).
type ChatPrices struct {
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
	Currency      string  `json:"currency,omitempty"`
}

// Cost is the price of a usage.
func (p ChatPrices) Cost(in, out int64) float64 {
	return (float64(in)*p.InputPerMTok + float64(out)*p.OutputPerMTok) / 1e6
}

// Normalize trims the profile and fills the defaults (max_steps).
func (p *Profile) Normalize() {
	p.Name = strings.TrimSpace(p.Name)
	p.Provider = strings.ToLower(strings.TrimSpace(p.Provider))
	p.Model = strings.TrimSpace(p.Model)
	p.BaseURL = strings.TrimSpace(p.BaseURL)
	p.Approval.Default = strings.TrimSpace(p.Approval.Default)
	if p.MaxSteps == 0 {
		p.MaxSteps = DefaultChatMaxSteps
	}
}

// Validate checks a profile; the error names the field (VALIDATION_ERROR).
func (p *Profile) Validate() *apierr.Error {
	switch {
	case p.Name == "":
		return apierr.Invalid("name", "name is required")
	case !ValidSlug(p.Name):
		return apierr.Invalid("name", "name must be a slug: 1 to 64 of a-z, 0-9, '-' and '_'")
	}
	switch p.Provider {
	case ChatProviderOpenAI, ChatProviderAnthropic:
	case "":
		return apierr.Invalid("provider", "provider is required (openai or anthropic)")
	default:
		return apierr.Invalid("provider", fmt.Sprintf("unknown provider %q (openai or anthropic)", p.Provider))
	}
	if p.Model == "" || len(p.Model) > 256 || hasControl(p.Model) {
		return apierr.Invalid("model", "model is required: 1 to 256 characters without control characters")
	}
	if p.BaseURL != "" {
		u, err := url.Parse(p.BaseURL)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			return apierr.Invalid("base_url", "base_url must be an absolute http or https URL")
		case u.User != nil:
			return apierr.Invalid("base_url", "base_url must not carry credentials (store the API key instead)")
		}
	}
	if p.APIKeyRef != "" && p.APIKeyRef != ChatProfileCredentialID(p.Name) {
		return apierr.Invalid("api_key_ref", "api_key_ref is set by the service")
	}
	switch p.Sampling {
	case "", SamplingAllow, SamplingDeny:
	default:
		return apierr.Invalid("sampling", fmt.Sprintf("sampling must be %q or %q", SamplingAllow, SamplingDeny))
	}
	if len(p.Owner) > 512 || hasControl(p.Owner) || (p.Owner != "" && !strings.Contains(p.Owner, ":") && p.Owner != "operator") {
		return apierr.Invalid("owner", "owner must be a principal id (key:<key id>, oauth:<issuer>#<subject>, operator) or empty for a shared profile")
	}
	if len(p.SystemPrompt) > MaxChatSystemPrompt {
		return apierr.Invalid("system_prompt", fmt.Sprintf("system_prompt is longer than %d bytes", MaxChatSystemPrompt))
	}
	if p.MaxSteps < 0 || p.MaxSteps > MaxChatMaxSteps {
		return apierr.Invalid("max_steps", fmt.Sprintf("max_steps must be between 1 and %d (0: %d)", MaxChatMaxSteps, DefaultChatMaxSteps))
	}
	if p.ToolBudget < 0 || p.ToolBudget > MaxChatToolBudget {
		return apierr.Invalid("tool_budget", fmt.Sprintf("tool_budget must be between 1 and %d (0: %d)", MaxChatToolBudget, DefaultChatToolBudget))
	}
	if p.MaxTokensPerTurn < 0 {
		return apierr.Invalid("max_tokens_per_turn", "max_tokens_per_turn must not be negative (0: no bound)")
	}
	if p.MaxTurnDuration < 0 {
		return apierr.Invalid("max_turn_duration", "max_turn_duration must not be negative (0: no bound)")
	}
	if e := checkGlobs("tool_filter.include", p.ToolFilter.Include); e != nil {
		return e
	}
	if e := checkGlobs("tool_filter.exclude", p.ToolFilter.Exclude); e != nil {
		return e
	}
	switch p.Approval.Default {
	case "", ApprovalAllow, ApprovalAsk, ApprovalDeny:
	default:
		return apierr.Invalid("approval.default", "approval.default must be allow, ask or deny")
	}
	if len(p.Approval.Rules) > MaxChatGlobs {
		return apierr.Invalid("approval.rules", fmt.Sprintf("at most %d approval rules", MaxChatGlobs))
	}
	for i, r := range p.Approval.Rules {
		field := fmt.Sprintf("approval.rules.%d", i)
		if e := checkGlobs(field+".tool", []string{r.Tool}); e != nil {
			return e
		}
		switch r.Decision {
		case ApprovalAllow, ApprovalAsk, ApprovalDeny:
		default:
			return apierr.Invalid(field+".decision", "decision must be allow, ask or deny")
		}
	}
	if pr := p.Prices; pr != nil {
		for field, v := range map[string]float64{"prices.input_per_mtok": pr.InputPerMTok, "prices.output_per_mtok": pr.OutputPerMTok} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return apierr.Invalid(field, "prices must be finite and not negative")
			}
		}
		if pr.Currency != "" && (len(pr.Currency) > 8 || hasControl(pr.Currency)) {
			return apierr.Invalid("prices.currency", "currency is a short code (USD, EUR…)")
		}
	}
	return nil
}

func checkGlobs(field string, globs []string) *apierr.Error {
	if len(globs) > MaxChatGlobs {
		return apierr.Invalid(field, fmt.Sprintf("at most %d globs", MaxChatGlobs))
	}
	for i, g := range globs {
		if _, err := path.Match(g, ""); err != nil || strings.TrimSpace(g) == "" {
			return apierr.Invalid(field, fmt.Sprintf("glob %d (%q) is not a valid glob", i, g))
		}
	}
	return nil
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, unicode.IsControl)
}

// ChatSendRequest is the body of mcp.v1.chat.send: one user message. An
// empty Conversation starts a new one (the reply names it); an empty Profile
// continues with the conversation's profile (a new one needs a profile).
type ChatSendRequest struct {
	Conversation string `json:"conversation,omitempty"`
	Profile      string `json:"profile,omitempty"`
	Message      string `json:"message"`
	// Context are earlier messages to start a new conversation with (an
	// OpenAI-style history: /v1/chat/completions sends its messages so);
	// only for a conversation that does not exist yet.
	Context []ChatContextMessage `json:"context,omitempty"`
	// NoInput says the sender has no way to put a server's questions to its
	// user (/v1/chat/completions): elicitations of the turn's tool calls are
	// declined instead of waiting as pending inputs.
	NoInput bool `json:"no_input,omitempty"`
	// NoTools says the turn may use no tool (/v1/chat/completions with
	// tool_choice "none"): the model is offered none, and a tool call it
	// writes anyway is dropped, not run.
	NoTools bool `json:"no_tools,omitempty"`
}

// Roles of a ChatContextMessage.
const (
	ChatRoleSystem    = "system"
	ChatRoleUser      = "user"
	ChatRoleAssistant = "assistant"
)

// MaxChatContext bounds the messages of ChatSendRequest.Context.
const MaxChatContext = 1000

// ChatContextMessage is one earlier message of a new conversation: system
// messages add to the profile's system prompt for the conversation.
type ChatContextMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Validate checks the request (VALIDATION_ERROR with the field).
func (r *ChatSendRequest) Validate() *apierr.Error {
	if r.Conversation != "" && !ValidConversationID(r.Conversation) {
		return apierr.Invalid("conversation", "conversation must be a slug or a uuid")
	}
	if r.Profile != "" && !ValidSlug(r.Profile) {
		return apierr.Invalid("profile", "profile must be a profile name (a slug)")
	}
	if r.Conversation == "" && r.Profile == "" {
		return apierr.Invalid("profile", "a new conversation needs a profile")
	}
	if strings.TrimSpace(r.Message) == "" {
		return apierr.Invalid("message", "message is empty")
	}
	if len(r.Message) > MaxChatMessage {
		return apierr.Invalid("message", fmt.Sprintf("message is longer than %d bytes", MaxChatMessage))
	}
	if len(r.Context) > MaxChatContext {
		return apierr.Invalid("context", fmt.Sprintf("at most %d context messages", MaxChatContext))
	}
	for i, m := range r.Context {
		switch m.Role {
		case ChatRoleSystem, ChatRoleUser, ChatRoleAssistant:
		default:
			return apierr.Invalid(fmt.Sprintf("context.%d.role", i), "role must be system, user or assistant")
		}
		if len(m.Content) > MaxChatMessage {
			return apierr.Invalid(fmt.Sprintf("context.%d.content", i), fmt.Sprintf("content is longer than %d bytes", MaxChatMessage))
		}
	}
	return nil
}

// ChatSendReply says the turn was accepted: its progress follows on Events
// (mcp.v1.events.chat.<conversation>), its entries in the conversation log.
type ChatSendReply struct {
	Conversation string `json:"conversation"`
	Turn         string `json:"turn"`
	Events       string `json:"events"`
}

// ChatConversationRef names one conversation: the body of
// mcp.v1.chat.{history,delete}.
type ChatConversationRef struct {
	Conversation string `json:"conversation"`
}

// Validate checks the conversation id.
func (r *ChatConversationRef) Validate() *apierr.Error { return checkConversation(r.Conversation) }

func checkConversation(id string) *apierr.Error {
	if id == "" {
		return apierr.Invalid("conversation", "conversation is required")
	}
	if !ValidConversationID(id) {
		return apierr.Invalid("conversation", "conversation must be a slug or a uuid")
	}
	return nil
}

// ChatHistoryRequest is the body of mcp.v1.chat.history.
type ChatHistoryRequest = ChatConversationRef

// ChatWatchRequest is the body of mcp.v1.chat.watch: may the caller follow
// the conversation's events? A conversation nobody has yet is claimed for
// the caller (its events will be theirs); another's is NOT_FOUND.
type ChatWatchRequest = ChatConversationRef

// ChatWatchReply says the caller may follow the conversation's events from
// the one after After (an MCP_EVENTS sequence; 0: all): those up to it are
// of an earlier conversation with the same id, deleted since, and not the
// caller's.
type ChatWatchReply struct {
	Conversation string `json:"conversation"`
	After        uint64 `json:"after,omitempty"`
}

// ChatAuditEvent records who did what to a conversation, on
// <prefix>.events.chat.<conversation>.audit (never message text).
type ChatAuditEvent struct {
	Action       string `json:"action"`
	Conversation string `json:"conversation"`
	// Principal is who asked (libs/principal id); Owner whose it is.
	Principal string `json:"principal"`
	Owner     string `json:"owner,omitempty"`
	// AsAdmin: an admin acted on a conversation not theirs.
	AsAdmin bool      `json:"as_admin,omitempty"`
	Turn    string    `json:"turn,omitempty"`
	At      time.Time `json:"at"`
}

// ChatAuditEvent actions.
const (
	ChatAuditSend    = "send"
	ChatAuditCancel  = "cancel"
	ChatAuditApprove = "approve"
	ChatAuditAnswer  = "answer"
	ChatAuditDelete  = "delete"
)

// ChatDeleteRequest is the body of mcp.v1.chat.delete.
type ChatDeleteRequest = ChatConversationRef

// ChatHistoryReply is a conversation's log, in order.
type ChatHistoryReply struct {
	Conversation string      `json:"conversation"`
	Entries      []ChatEntry `json:"entries"`
}

// ChatListRequest is the body of mcp.v1.chat.list (nothing yet).
type ChatListRequest struct{}

// ChatListReply lists the conversations, most recent first.
type ChatListReply struct {
	Conversations []ChatConversation `json:"conversations"`
}

// ChatConversation is one conversation of a list.
type ChatConversation struct {
	Conversation string `json:"conversation"`
	// Entries is the number of entries of its log; LastSeq the last one's seq.
	Entries      uint64    `json:"entries"`
	LastSeq      uint64    `json:"last_seq"`
	LastActivity time.Time `json:"last_activity"`
	// Owner is the principal the conversation belongs to ("": stored before
	// conversations had owners; only admins reach it).
	Owner string `json:"owner,omitempty"`
}

// ChatCancelReply says how the cancelled turn ended (Done is nil when no
// turn was running).
type ChatCancelReply struct {
	Conversation string    `json:"conversation"`
	Turn         string    `json:"turn,omitempty"`
	Done         *ChatDone `json:"done,omitempty"`
}

// ChatPendingRequest is the body of mcp.v1.chat.pending.
type ChatPendingRequest = ChatConversationRef

// ChatPendingReply lists the tool calls of a conversation awaiting approval
// (state awaiting_approval), for a client that joins while they wait.
type ChatPendingReply struct {
	Conversation string         `json:"conversation"`
	Calls        []ChatToolCall `json:"calls"`
	// Inputs are the servers' requests for input awaiting an answer
	// (mcp.v1.chat.answer), oldest first.
	Inputs []ChatInput `json:"inputs"`
}

// ChatProfilePutRequest is the body of mcp.v1.chat.profiles.put: the
// profile (created, or replaced from its Revision) and, when given, its API
// key sealed to the credential service (credclient.Sealer.SealSecrets of
// Credentials{Env: {ChatAPIKeyEnv: key}}): never in clear on the bus. No
// key keeps the stored one; RemoveAPIKey deletes it.
type ChatProfilePutRequest struct {
	Profile Profile `json:"profile"`
	SealedSecrets
	RemoveAPIKey bool `json:"remove_api_key,omitempty"`
}

// ChatProfileRef names a profile: the body of
// mcp.v1.chat.profiles.{get,delete} and the reply of delete.
type ChatProfileRef struct {
	Name string `json:"name"`
}

// Validate checks the name.
func (r *ChatProfileRef) Validate() *apierr.Error {
	if r.Name == "" || !ValidSlug(r.Name) {
		return apierr.Invalid("name", "name must be a profile name (a slug)")
	}
	return nil
}

// ChatProfileListRequest is the body of mcp.v1.chat.profiles.list.
type ChatProfileListRequest struct{}

// ChatProfileListReply lists the profiles by name.
type ChatProfileListReply struct {
	Profiles []Profile `json:"profiles"`
}

// ChatApproveReply confirms a decision was recorded.
type ChatApproveReply = ChatApproveRequest

// ChatCancelRequest is the body of mcp.v1.chat.cancel: it ends the running
// turn of the conversation (Turn, when given, must be that turn).
type ChatCancelRequest struct {
	Conversation string `json:"conversation"`
	Turn         string `json:"turn,omitempty"`
}

// Validate checks the request.
func (r *ChatCancelRequest) Validate() *apierr.Error { return checkConversation(r.Conversation) }

// Decisions of mcp.v1.chat.approve.
const (
	DecisionApprove             = "approve"
	DecisionDeny                = "deny"
	DecisionApproveConversation = "approve_conversation"
)

// ChatApproveRequest answers a tool call awaiting approval.
type ChatApproveRequest struct {
	Conversation string `json:"conversation"`
	CallID       string `json:"call_id"`
	Decision     string `json:"decision"`
}

// Validate checks the request.
func (r *ChatApproveRequest) Validate() *apierr.Error {
	if e := checkConversation(r.Conversation); e != nil {
		return e
	}
	if strings.TrimSpace(r.CallID) == "" || len(r.CallID) > 256 || hasControl(r.CallID) {
		return apierr.Invalid("call_id", "call_id is required")
	}
	switch r.Decision {
	case DecisionApprove, DecisionDeny, DecisionApproveConversation:
		return nil
	}
	return apierr.Invalid("decision", "decision must be approve, deny or approve_conversation")
}

// Kinds of chat events.
const (
	ChatEventTextDelta = "text_delta"
	ChatEventToolCall  = "tool_call"
	ChatEventUsage     = "usage"
	ChatEventError     = "error"
	ChatEventDone      = "done"
	// ChatEventDeleted: the conversation was deleted, its last event (no
	// turn). A stream following it ends there: the id may be another
	// principal's next.
	ChatEventDeleted = "deleted"
	// ChatEventInputRequested: a tool call's server asks the user for input
	// (Input, answered with mcp.v1.chat.answer).
	ChatEventInputRequested = "input_requested"
	// ChatEventInputAnswered: that input was answered, or timed out (Input
	// with its Action and Reason; never the content).
	ChatEventInputAnswered = "input_answered"
)

// States of a tool call.
const (
	ToolCallStarted          = "started"
	ToolCallCompleted        = "completed"
	ToolCallFailed           = "failed"
	ToolCallTimedOut         = "timed_out"
	ToolCallAwaitingApproval = "awaiting_approval"
)

// Reasons a turn ends (ChatDone.Reason).
const (
	TurnFinal     = "final"
	TurnMaxSteps  = "max_steps"
	TurnBudget    = "budget"
	TurnCancelled = "cancelled"
	TurnRepeated  = "repeated_call"
	TurnError     = "error"
)

// ChatQuotaField is the field of the RATE_LIMITED error refusing a send of a
// user whose conversations hold their quota of the log (deleting
// conversations helps), and of the one ending a turn whose model provider's
// quota is spent (OpenAI's insufficient_quota): waiting does not help
// (OpenAI clients read it as insufficient_quota).
const ChatQuotaField = "quota"

// ChatContextField is the field of the VALIDATION_ERROR ending a turn whose
// conversation no longer fits the model's context window (OpenAI's
// context_length_exceeded, Anthropic's "prompt is too long"): the whole
// history goes to the model at every step and is never trimmed, so every
// later turn of the conversation fails alike; a new conversation is needed.
const ChatContextField = "context_length"

// Why a model step stopped (ChatDone.StopReason), normalised across
// providers; others pass through as the provider sent them.
const (
	ChatStopEndTurn   = "end_turn"
	ChatStopToolUse   = "tool_use"
	ChatStopMaxTokens = "max_tokens"
	ChatStopRefusal   = "refusal"
)

// ChatEvent is one event on mcp.v1.events.chat.<conversation>; the member
// named by Kind is set (text for text_delta).
type ChatEvent struct {
	Kind         string        `json:"kind"`
	Conversation string        `json:"conversation"`
	Turn         string        `json:"turn,omitempty"` // every kind but deleted
	Text         string        `json:"text,omitempty"`
	ToolCall     *ChatToolCall `json:"tool_call,omitempty"`
	Usage        *ChatUsage    `json:"usage,omitempty"`
	Error        *apierr.Error `json:"error,omitempty"`
	// RetryAfter, on an error event, says the turn goes on: the model's
	// provider rate-limited the step and it is asked again in that many
	// seconds (an error without it ends the turn).
	RetryAfter int        `json:"retry_after,omitempty"`
	Done       *ChatDone  `json:"done,omitempty"`
	Input      *ChatInput `json:"input,omitempty"`
	At         time.Time  `json:"at"`
}

// ChatToolCall is the state of one tool call the model asked for.
type ChatToolCall struct {
	CallID string `json:"call_id"`
	// Tool is the namespaced name <server>__<tool>.
	Tool      string          `json:"tool"`
	State     string          `json:"state"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Summary is a short text of the result (completed, failed).
	Summary    string  `json:"summary,omitempty"`
	DurationMS float64 `json:"duration_ms,omitempty"`
}

// ChatUsage is the token usage of one model step (and its cost when the
// profile has prices).
type ChatUsage struct {
	Step         int      `json:"step"`
	InputTokens  int64    `json:"input_tokens"`
	OutputTokens int64    `json:"output_tokens"`
	Cost         *float64 `json:"cost,omitempty"`
	Currency     string   `json:"currency,omitempty"`
	// Sampling: the tokens of a server's sampling request answered during
	// the step's tool calls (sampling: allow), not of the step itself.
	Sampling bool `json:"sampling,omitempty"`
}

// ChatDone ends a turn.
type ChatDone struct {
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	Steps   int    `json:"steps"`
	// StopReason is why the model's last step stopped (final turns): end_turn,
	// max_tokens, refusal, or what the provider sent. A final answer cut by
	// the provider's token limit or filter says so here.
	StopReason string `json:"stop_reason,omitempty"`
}

// Kinds of conversation log entries.
const (
	EntryUserMessage = "user_message"
	EntryModelStep   = "model_step"
	EntryToolCall    = "tool_call"
	EntryToolResult  = "tool_result"
	EntryApproval    = "approval"
	EntryTurnEnd     = "turn_end"
	// EntryInstructions adds to the profile's system prompt for the
	// conversation (the system messages of a ChatSendRequest.Context).
	EntryInstructions = "instructions"
)

// ChatEntry is one entry of a conversation log. Seq numbers the entries of
// one conversation from 1 without gaps: two writers cannot both append the
// same Seq (the second gets CONFLICT). Payload is the kind's own JSON object.
type ChatEntry struct {
	Seq     uint64          `json:"seq"`
	Kind    string          `json:"kind"`
	Turn    string          `json:"turn"`
	Payload json.RawMessage `json:"payload,omitempty"`
	At      time.Time       `json:"at"`
}

// Validate checks an entry before it is appended (Seq and At are the log's).
func (e *ChatEntry) Validate() *apierr.Error {
	switch e.Kind {
	case EntryUserMessage, EntryModelStep, EntryToolCall, EntryToolResult, EntryApproval, EntryTurnEnd, EntryInstructions:
	default:
		return apierr.Invalid("kind", fmt.Sprintf("unknown entry kind %q", e.Kind))
	}
	if e.Turn == "" || !ValidConversationID(e.Turn) {
		return apierr.Invalid("turn", "turn must be a slug or a uuid")
	}
	if len(e.Payload) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(e.Payload, &obj); err != nil || obj == nil {
			return apierr.Invalid("payload", "payload must be a JSON object")
		}
	}
	return nil
}
