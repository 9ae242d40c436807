package loop

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/chat/guard"
	"github.com/mcpbus/mcpbus/services/chat/provider"
)

// The payloads of the log entries the loop writes (ChatEntry.Payload).

// UserMessage is the payload of a user_message entry.
type UserMessage struct {
	Text string `json:"text"`
	// Profile is the profile the turn runs with (absent in context messages).
	Profile string `json:"profile,omitempty"`
	// NoInput says the sender cannot put a server's questions to its user
	// (model.ChatSendRequest.NoInput): the turn declines elicitations.
	NoInput bool `json:"no_input,omitempty"`
	// NoTools says the turn may use no tool (model.ChatSendRequest.NoTools);
	// logged so a resumed turn keeps it.
	NoTools bool `json:"no_tools,omitempty"`
	// Sender is who sent it (its id, kind and tool filter; no secret): a
	// resumed turn keeps the sender's filter and name.
	Sender *principal.Principal `json:"sender,omitempty"`
}

// Instructions is the payload of an instructions entry: text added to the
// profile's system prompt for the conversation.
type Instructions struct {
	Text string `json:"text"`
}

// StepCall is one tool call of a model step.
type StepCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// StepUsage is the token usage of a model step.
type StepUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// ModelStep is the payload of a model_step entry.
type ModelStep struct {
	// Step numbers the model steps of the turn from 1.
	Step      int        `json:"step"`
	Text      string     `json:"text,omitempty"`
	ToolCalls []StepCall `json:"tool_calls,omitempty"`
	// FromText says the tool calls were written by the model as text
	// (provider.TextToolCalls) and are run as if they were tool calls.
	FromText   bool      `json:"from_text,omitempty"`
	StopReason string    `json:"stop_reason,omitempty"`
	Usage      StepUsage `json:"usage"`
}

// ToolResult is the payload of a tool_result entry.
type ToolResult struct {
	CallID string `json:"call_id"`
	// Tool is the namespaced name the model asked for.
	Tool string `json:"tool"`
	// Server is set when the call went to the server (a breaker counts it).
	Server string `json:"server,omitempty"`
	// CallFailed says the call itself failed (error or timeout), not the
	// tool: the breaker counts these.
	CallFailed bool `json:"call_failed,omitempty"`
	// State is completed, failed or timed_out.
	State string `json:"state"`
	// Content is what the model sees (cut when the result was too large).
	Content string `json:"content"`
	IsError bool   `json:"is_error,omitempty"`
	// Full is the whole result when Content is cut and no result store
	// keeps it: read_result reads it.
	Full string `json:"full,omitempty"`
	Cut  bool   `json:"cut,omitempty"`
	// Stored says the whole result is in Deps.Results (under the
	// conversation and CallID) rather than in Full.
	Stored bool `json:"stored,omitempty"`
	// Size is the length in bytes of the whole result when it was cut: more
	// than was kept when it exceeded the keep (or store) limit.
	Size       int     `json:"size,omitempty"`
	DurationMS float64 `json:"duration_ms,omitempty"`
	// Found are the tools a search_tools call found, best first: they are
	// offered to the model in the conversation's later steps.
	Found []string `json:"found,omitempty"`
}

// Approval is the payload of an approval entry: the answer to an "ask".
type Approval struct {
	CallID   string `json:"call_id"`
	Tool     string `json:"tool"`
	Decision string `json:"decision"`
}

// payload is an entry's decoded payload; ok is false when it did not
// decode cleanly (what was decoded is kept: a few readers use it anyway).
type payload struct {
	v  any
	ok bool
}

// payloads caches the decoded payloads of a turn's entries by position.
// Entries never change, and without it every step would decode the whole
// conversation twice (derive, messages): milliseconds per step once results
// pile up. Only the turn's driving goroutine uses it.
type payloads []payload

// of returns the payload of entries[i], decoding it on first use.
func (c *payloads) of(entries []model.ChatEntry, i int) payload {
	if len(*c) < len(entries) {
		*c = append(*c, make([]payload, len(entries)-len(*c))...)
	}
	if p := (*c)[i]; p.v != nil {
		return p
	}
	p := payload{ok: true}
	switch entries[i].Kind {
	case model.EntryUserMessage:
		p.v = &UserMessage{}
	case model.EntryInstructions:
		p.v = &Instructions{}
	case model.EntryModelStep:
		p.v = &ModelStep{}
	case model.EntryToolResult:
		p.v = &ToolResult{}
	case model.EntryApproval:
		p.v = &Approval{}
	case model.EntryToolCall:
		p.v = &ToolTask{}
	case model.EntryTurnEnd:
		p.v = &model.ChatDone{}
	}
	if p.v != nil {
		p.ok = json.Unmarshal(entries[i].Payload, p.v) == nil
	} else {
		p.v = struct{}{} // a kind the loop does not read
	}
	(*c)[i] = p
	return p
}

// state is everything the loop knows, derived from the log alone.
type state struct {
	entries []model.ChatEntry
	// decoded are the entries' payloads (shared with the turn: read-only).
	decoded *payloads
	// turn is the last turn's id; ended reports it has a turn_end.
	turn  string
	ended bool
	done  model.ChatDone
	// start is when the turn's user message was written.
	start time.Time
	// steps and tokens are the turn's model steps and tokens (in + out).
	steps  int
	tokens int64
	// last is the turn's last model step (nil: none yet).
	last *ModelStep
	// pending are the last step's calls without a result, in order.
	pending []StepCall
	// repeated is the call of the last step that tripped the repeat guard.
	repeated *StepCall
	// breaker holds the servers' consecutive failures of the turn.
	breaker *guard.Breaker
	// approvals are the turn's decisions by call id.
	approvals map[string]string
	// results are every tool result of the conversation by call id.
	results map[string]ToolResult
	anyCut  bool
	// tasks are the calls started as tasks, by call id (tool_call entries).
	tasks map[string]ToolTask
	// found are the tools the conversation's searches found, each once,
	// the most recently found last.
	found []string
	// instructions are the conversation's instructions entries, joined.
	instructions string
}

// derive replays the log. decoded caches the entries' payloads (nil: a
// new cache); repeatLimit and breakerLimit are the guards'.
func derive(entries []model.ChatEntry, decoded *payloads, repeatLimit, breakerLimit int) *state {
	if decoded == nil {
		decoded = &payloads{}
	}
	s := &state{entries: entries, decoded: decoded, breaker: guard.NewBreaker(breakerLimit), approvals: map[string]string{}, results: map[string]ToolResult{},
		tasks: map[string]ToolTask{}}
	if len(entries) == 0 {
		return s
	}
	s.turn = entries[len(entries)-1].Turn
	repeats := guard.NewRepeats(repeatLimit)
	for i, e := range entries {
		p := decoded.of(entries, i)
		if e.Kind == model.EntryInstructions {
			if in := p.v.(*Instructions); p.ok && strings.TrimSpace(in.Text) != "" {
				s.instructions = strings.TrimSpace(s.instructions + "\n\n" + in.Text)
			}
		}
		if e.Kind == model.EntryToolResult && p.ok {
			r := p.v.(*ToolResult)
			s.results[r.CallID] = *r
			s.anyCut = s.anyCut || r.Cut
			for _, name := range r.Found {
				s.found = append(slices.DeleteFunc(s.found, func(n string) bool { return n == name }), name)
			}
		}
		if e.Kind == model.EntryToolCall && p.ok {
			tt := p.v.(*ToolTask)
			s.tasks[tt.CallID] = *tt
		}
		if e.Turn != s.turn {
			continue
		}
		switch e.Kind {
		case model.EntryUserMessage:
			if s.start.IsZero() {
				s.start = e.At
			}
		case model.EntryModelStep:
			if !p.ok {
				continue
			}
			m := p.v.(*ModelStep)
			s.steps++
			s.tokens += tokens(m.Usage.InputTokens) + tokens(m.Usage.OutputTokens)
			s.last = m
			s.repeated = nil
			for i, c := range m.ToolCalls {
				if _, tripped := repeats.Call(c.Name, json.RawMessage(c.Arguments)); tripped && s.repeated == nil {
					s.repeated = &m.ToolCalls[i]
				}
			}
		case model.EntryToolResult:
			if r := p.v.(*ToolResult); p.ok && r.Server != "" {
				s.breaker.Record(r.Server, !r.CallFailed)
			}
		case model.EntryApproval:
			if a := p.v.(*Approval); p.ok {
				s.approvals[a.CallID] = a.Decision
			}
		case model.EntryTurnEnd:
			s.ended = true
			s.done = *p.v.(*model.ChatDone)
		}
	}
	if s.last != nil {
		for _, c := range s.last.ToolCalls {
			if _, ok := s.results[c.ID]; !ok {
				s.pending = append(s.pending, c)
			}
		}
	}
	return s
}

// callIDs are the ids of every tool call and tool result of the conversation.
func (s *state) callIDs() map[string]bool {
	ids := map[string]bool{}
	for id := range s.results {
		ids[id] = true
	}
	for i, e := range s.entries {
		if e.Kind != model.EntryModelStep {
			continue
		}
		if p := s.decoded.of(s.entries, i); p.ok {
			for _, c := range p.v.(*ModelStep).ToolCalls {
				ids[c.ID] = true
			}
		}
	}
	return ids
}

// usableCallID reports whether a call id the model gave can stand for the
// call: one its user can answer an approval by (model.ChatApproveRequest).
func usableCallID(id string) bool {
	return strings.TrimSpace(id) != "" && len(id) <= maxCallID && utf8.ValidString(id) &&
		!strings.ContainsFunc(id, unicode.IsControl)
}

// maxCallID bounds a call id (model.ChatApproveRequest takes up to 256 bytes).
const maxCallID = 256

// messages is the conversation as the model sees it: every user message,
// model step and tool result of every turn. A call left without a result
// (a turn that ended while it ran) is answered with an error so that every
// provider accepts the history.
func (s *state) messages() []provider.Message {
	var out []provider.Message
	var open []StepCall // the calls of the last assistant message not answered yet
	flush := func() {
		if len(open) == 0 {
			return
		}
		var rs []provider.ToolResult
		for _, c := range open {
			rs = append(rs, provider.ToolResult{CallID: c.ID, Content: "The call did not complete (the turn ended before its result).", IsError: true})
		}
		if n := len(out); n > 0 && out[n-1].Role == provider.Tool {
			out[n-1].ToolResults = append(out[n-1].ToolResults, rs...)
		} else {
			out = append(out, provider.Message{Role: provider.Tool, ToolResults: rs})
		}
		open = nil
	}
	for i, e := range s.entries {
		p := s.decoded.of(s.entries, i)
		switch e.Kind {
		case model.EntryUserMessage:
			flush()
			out = append(out, provider.Message{Role: provider.User, Text: p.v.(*UserMessage).Text})
		case model.EntryModelStep:
			flush()
			if !p.ok {
				continue
			}
			m := p.v.(*ModelStep)
			msg := provider.Message{Role: provider.Assistant, Text: m.Text}
			for _, c := range m.ToolCalls {
				msg.ToolCalls = append(msg.ToolCalls, provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
			out = append(out, msg)
			open = slices.Clone(m.ToolCalls)
		case model.EntryToolResult:
			if !p.ok {
				continue
			}
			r := p.v.(*ToolResult)
			i := slices.IndexFunc(open, func(c StepCall) bool { return c.ID == r.CallID })
			if i < 0 {
				continue // not a call of the last step: nothing to attach it to
			}
			open = slices.Delete(open, i, i+1)
			res := provider.ToolResult{CallID: r.CallID, Content: r.Content, IsError: r.IsError}
			if n := len(out); n > 0 && out[n-1].Role == provider.Tool {
				out[n-1].ToolResults = append(out[n-1].ToolResults, res)
			} else {
				out = append(out, provider.Message{Role: provider.Tool, ToolResults: []provider.ToolResult{res}})
			}
		}
	}
	flush()
	return out
}

// summary is a short one-line text of a result for events.
func summary(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const max = 200
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
