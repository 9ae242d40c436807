package provider

import (
	"context"
	"errors"
	"io"

	openai "github.com/sashabaranov/go-openai"
)

// stream runs one attempt, accumulating text and tool call deltas. It reports
// whether output was already streamed (then the attempt cannot be retried).
func (m *openaiModel) stream(ctx context.Context, c *openai.Client, req openai.ChatCompletionRequest, onDelta func(Delta)) (Step, bool, error) {
	s, err := c.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return Step{}, false, err
	}
	defer s.Close()
	var (
		step     Step
		text     []byte
		streamed bool
		calls    []ToolCall
		slot     = map[int]int{} // delta index → calls index
		finish   string
		budget   replyBudget
	)
	for {
		chunk, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break // [DONE], or the end of the body
		}
		if err != nil {
			return Step{}, streamed, err
		}
		if u := chunk.Usage; u != nil && (u.PromptTokens != 0 || u.CompletionTokens != 0) {
			step.Usage = Usage{InputTokens: int64(u.PromptTokens), OutputTokens: int64(u.CompletionTokens)}
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue
			}
			if d := choice.Delta.Content; d != "" {
				streamed = true
				if err := budget.add(len(d)); err != nil {
					return Step{}, streamed, err
				}
				text = append(text, d...)
				if onDelta != nil {
					onDelta(Delta{Text: d})
				}
			}
			for _, tc := range choice.Delta.ToolCalls {
				index := 0 // absent in some servers' single-call chunks
				if tc.Index != nil {
					index = *tc.Index
				}
				i, ok := slot[index]
				// Some servers number every call 0: a new id is a new call.
				if !ok || (tc.ID != "" && calls[i].ID != "" && tc.ID != calls[i].ID) {
					if err := budget.call(); err != nil {
						return Step{}, true, err
					}
					calls = append(calls, ToolCall{})
					i = len(calls) - 1
					slot[index] = i
				}
				streamed = true
				if err := budget.add(len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)); err != nil {
					return Step{}, streamed, err
				}
				c := &calls[i]
				if tc.ID != "" {
					c.ID = tc.ID
				}
				if c.Name == "" {
					c.Name = tc.Function.Name
				}
				c.Arguments += tc.Function.Arguments
			}
			if choice.FinishReason != "" {
				finish = string(choice.FinishReason)
			}
		}
	}
	if finish == "" {
		return Step{}, streamed, errCutShort
	}
	for i := range calls {
		if calls[i].Arguments == "" {
			calls[i].Arguments = "{}"
		}
	}
	step.Text = string(text)
	step.ToolCalls = calls
	step.StopReason = openaiStop(finish)
	return step, streamed, nil
}

// openaiStop normalises a finish_reason; others pass through as sent.
func openaiStop(finish string) StopReason {
	switch openai.FinishReason(finish) {
	case openai.FinishReasonStop:
		return StopEndTurn
	case openai.FinishReasonToolCalls, openai.FinishReasonFunctionCall:
		return StopToolUse
	case openai.FinishReasonLength:
		return StopMaxTokens
	case openai.FinishReasonContentFilter:
		return StopRefusal
	}
	return StopReason(finish)
}
