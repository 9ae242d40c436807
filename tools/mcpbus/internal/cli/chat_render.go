package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// renderer prints the events of a turn. Text goes to out; tool calls,
// errors and notes to errw. It is used from one goroutine only.
type renderer struct {
	out, errw io.Writer
	// json prints every event as one JSON line to out, and nothing else there.
	json bool
	// stream writes text deltas as they come (interactive); otherwise the text
	// of each step is held, and only the last step's (the answer) goes to out.
	stream bool
	// spin animates a line for the running calls (errw is a terminal).
	spin bool

	midLine bool // out has a partial line (stream)
	held    strings.Builder
	running []model.ChatToolCall
	frame   int
	drawn   bool // the spinner line is on screen
	usage   turnUsage
	lastErr *apierr.Error
}

// turnUsage sums the usage events of a turn.
type turnUsage struct {
	steps    int
	in, out  int64
	cost     float64
	hasCost  bool
	currency string
}

var spinFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// beginTurn forgets what the previous turn left.
func (r *renderer) beginTurn() {
	r.held.Reset()
	r.running = nil
	r.usage = turnUsage{}
	r.lastErr = nil
	r.midLine = false
}

// event prints one event of the turn.
func (r *renderer) event(ev model.ChatEvent) {
	r.account(ev)
	if r.json {
		b, err := json.Marshal(ev)
		if err == nil {
			fmt.Fprintf(r.out, "%s\n", b)
		}
		return
	}
	switch ev.Kind {
	case model.ChatEventTextDelta:
		r.text(ev.Text)
	case model.ChatEventToolCall:
		if ev.ToolCall != nil {
			r.toolCall(*ev.ToolCall)
		}
	case model.ChatEventError:
		if ev.Error != nil {
			r.note(formatErr(ev.Error))
		}
	case model.ChatEventDone:
		r.done(ev.Done)
	case model.ChatEventInputAnswered:
		if in := ev.Input; in != nil {
			line := fmt.Sprintf("input for %s: %s", in.Tool, in.Action)
			if in.Reason != "" {
				line += " (" + in.Reason + ")"
			}
			r.note(line)
		}
	}
}

// account keeps what the end of the turn reports, in every mode.
func (r *renderer) account(ev model.ChatEvent) {
	switch {
	case ev.Kind == model.ChatEventUsage && ev.Usage != nil:
		u := ev.Usage
		r.usage.steps++
		r.usage.in += u.InputTokens
		r.usage.out += u.OutputTokens
		if u.Cost != nil {
			r.usage.cost += *u.Cost
			r.usage.hasCost = true
			r.usage.currency = u.Currency
		}
	case ev.Kind == model.ChatEventError && ev.Error != nil:
		r.lastErr = ev.Error
	}
}

func (r *renderer) text(s string) {
	s = termText(s)
	if !r.stream {
		r.held.WriteString(s)
		return
	}
	r.clearSpin()
	fmt.Fprint(r.out, s)
	if s != "" {
		r.midLine = !strings.HasSuffix(s, "\n")
	}
}

// endText ends the text of a step before a tool call or a note: streamed
// text gets its newline, held text (the model's narration before calling a
// tool, not its answer) goes to errw.
func (r *renderer) endText() {
	if r.midLine {
		fmt.Fprintln(r.out)
		r.midLine = false
	}
	if t := strings.TrimSpace(r.held.String()); t != "" {
		r.clearSpin()
		fmt.Fprintln(r.errw, t)
	}
	r.held.Reset()
}

func (r *renderer) toolCall(tc model.ChatToolCall) {
	r.endText()
	switch tc.State {
	case model.ToolCallStarted:
		r.setRunning(tc, true)
		r.drawSpin()
		return
	case model.ToolCallAwaitingApproval:
		return // the prompt shows it
	}
	r.setRunning(tc, false)
	r.clearSpin()
	ms := fmt.Sprintf("(%s ms)", formatMS(tc.DurationMS))
	switch tc.State {
	case model.ToolCallCompleted:
		fmt.Fprintf(r.errw, "✓ %s %s\n", printable(tc.Tool), ms)
	case model.ToolCallFailed:
		fmt.Fprintf(r.errw, "✗ %s %s: %s\n", printable(tc.Tool), ms, oneLine(cmpStr(tc.Summary, "failed"), 160))
	case model.ToolCallTimedOut:
		fmt.Fprintf(r.errw, "⏱ %s timed out %s\n", printable(tc.Tool), ms)
	default:
		fmt.Fprintf(r.errw, "· %s %s\n", printable(tc.Tool), printable(tc.State))
	}
	r.drawSpin()
}

func formatMS(ms float64) string {
	if ms < 10 {
		return fmt.Sprintf("%.1f", ms)
	}
	return fmt.Sprintf("%.0f", ms)
}

func cmpStr(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}

func (r *renderer) setRunning(tc model.ChatToolCall, on bool) {
	for i, c := range r.running {
		if c.CallID == tc.CallID {
			r.running = append(r.running[:i], r.running[i+1:]...)
			break
		}
	}
	if on {
		r.running = append(r.running, tc)
	}
}

// tick advances the spinner (called a few times a second).
func (r *renderer) tick() {
	if len(r.running) > 0 {
		r.frame++
		r.drawSpin()
	}
}

func (r *renderer) drawSpin() {
	if !r.spin || r.json || len(r.running) == 0 {
		return
	}
	names := make([]string, len(r.running))
	for i, c := range r.running {
		names[i] = c.Tool
	}
	fmt.Fprintf(r.errw, "\r\033[K%s %s …", spinFrames[r.frame%len(spinFrames)], oneLine(strings.Join(names, ", "), 70))
	r.drawn = true
}

// clearSpin takes the spinner line off the screen before other output.
func (r *renderer) clearSpin() {
	if r.drawn {
		fmt.Fprint(r.errw, "\r\033[K")
		r.drawn = false
	}
}

// note prints a line to errw, after the text and spinner. It quotes what
// others wrote (a tool's name, a provider's error), so it is shown without
// control characters.
func (r *renderer) note(s string) {
	r.endText()
	r.clearSpin()
	fmt.Fprintln(r.errw, printableLines(s))
	r.drawSpin()
}

func (r *renderer) done(d *model.ChatDone) {
	r.running = nil
	r.clearSpin()
	if r.midLine {
		fmt.Fprintln(r.out)
		r.midLine = false
	}
	if !r.stream {
		if t := strings.TrimSpace(r.held.String()); t != "" {
			fmt.Fprintln(r.out, t)
		}
		r.held.Reset()
	}
	if d != nil && d.Reason != model.TurnFinal {
		if d.Reason == model.TurnError && r.lastErr != nil && r.lastErr.Message == d.Message {
			// The chat service sends the error that ends a turn as an
			// error event (printed by note, with its code) and again as
			// the done message: say it once.
			return
		}
		msg := "turn ended: " + d.Reason
		if d.Message != "" {
			msg += ": " + d.Message
		}
		fmt.Fprintln(r.errw, printableLines(msg))
	}
}

// termText is text of the model as the terminal may show it: line breaks
// and tabs kept, carriage returns dropped, other control characters (an
// escape sequence) and bidi overrides as U+FFFD. The model writes what a
// tool's result tells it to, and an escape sequence could conceal the
// approval prompt that follows and show a fake one, rewrite lines or set
// the clipboard (OSC 52).
func termText(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n', r == '\t':
			return r
		case r == '\r':
			return -1
		case unsafeRune(r):
			return unicode.ReplacementChar
		}
		return r
	}, s)
}

// summary is the usage line of the turn ("" when there was none).
func (r *renderer) summary() string {
	u := r.usage
	if u.steps == 0 {
		return ""
	}
	s := fmt.Sprintf("%d step%s · %d in / %d out tokens", u.steps, plural(u.steps), u.in, u.out)
	if u.hasCost {
		s += fmt.Sprintf(" · %.4f %s", u.cost, u.currency)
	}
	return strings.TrimSpace(s)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func formatErr(e *apierr.Error) string {
	if e.Field != "" {
		return fmt.Sprintf("error: %s: %s (field %s)", e.Code, e.Message, e.Field)
	}
	return fmt.Sprintf("error: %s: %s", e.Code, e.Message)
}
