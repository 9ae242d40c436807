package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/mcpbus/mcpbus/libs/elicitform"
	"github.com/mcpbus/mcpbus/libs/model"
)

// formPrompt asks a server's request for input (an input_requested event)
// in the terminal: first whether to answer, decline or cancel, then each
// field of the form in turn (its title, description, choices and default
// shown), asking a field again until its value is valid.
type formPrompt struct {
	s       *chatSession
	in      model.ChatInput
	form    *elicitform.Form
	action  string // chosen at the first line; accept fills the fields
	field   int
	content map[string]any
}

func newFormPrompt(s *chatSession, in model.ChatInput) (*formPrompt, error) {
	f, err := elicitform.Parse(in.RequestedSchema)
	if err != nil {
		return nil, fmt.Errorf("%s asks for input in a form the terminal cannot show: %v", in.Server, err)
	}
	return &formPrompt{s: s, in: in, form: f, content: map[string]any{}}, nil
}

func (f *formPrompt) start() {
	f.s.r.note(fmt.Sprintf("%s (server %s) asks: %s", f.in.Tool, f.in.Server, oneLine(f.in.Message, 500)))
	fmt.Fprint(f.s.g.stderr, "[a]nswer / [d]ecline / [c]ancel > ")
}

// line takes one line of input; it reports whether the form is done (its
// action chosen and, for accept, every field filled in). No more input
// (ok false) cancels it.
func (f *formPrompt) line(text string, ok bool) bool {
	if !ok {
		f.s.r.note("no answer on stdin: cancelled")
		f.action = model.InputCancel
		return true
	}
	text = strings.TrimSpace(text)
	if f.action == "" {
		switch strings.ToLower(text) {
		case "a", "answer":
			f.action = model.InputAccept
			if len(f.form.Fields) == 0 {
				return true
			}
			fmt.Fprintln(f.s.g.stderr, "(type /decline or /cancel at any field to give up)")
			f.ask()
			return false
		case "d", "decline":
			f.action = model.InputDecline
			return true
		case "c", "cancel":
			f.action = model.InputCancel
			return true
		}
		fmt.Fprint(f.s.g.stderr, "answer a, d or c: ")
		return false
	}
	switch text {
	case "/decline":
		f.action = model.InputDecline
		return true
	case "/cancel":
		f.action = model.InputCancel
		return true
	}
	fd := f.form.Fields[f.field]
	switch {
	case text == "" && fd.Default != nil:
		f.content[fd.Name] = fd.Default
	case text == "" && fd.Required:
		fmt.Fprintf(f.s.g.stderr, "%s is required\n", fd.Label())
		f.ask()
		return false
	case text == "":
	default:
		v, err := fd.Value(text)
		if err != nil {
			fmt.Fprintln(f.s.g.stderr, err)
			f.ask()
			return false
		}
		f.content[fd.Name] = v
	}
	f.field++
	if f.field < len(f.form.Fields) {
		f.ask()
		return false
	}
	return true
}

// ask prompts for the current field.
func (f *formPrompt) ask() {
	fd := f.form.Fields[f.field]
	w := f.s.g.stderr
	if fd.Description != "" {
		fmt.Fprintf(w, "  %s\n", fd.Description)
	}
	for i, e := range fd.Enum {
		fmt.Fprintf(w, "  %d) %s\n", i+1, e)
	}
	var hints []string
	switch {
	case fd.Type == elicitform.Boolean:
		hints = append(hints, "yes/no")
	case len(fd.Enum) > 0:
		hints = append(hints, "a number or a choice")
	case fd.Format != "":
		hints = append(hints, fd.Format)
	case fd.Type != elicitform.String:
		hints = append(hints, fd.Type)
	}
	if fd.Minimum != nil {
		hints = append(hints, "≥ "+strconv.FormatFloat(*fd.Minimum, 'g', -1, 64))
	}
	if fd.Maximum != nil {
		hints = append(hints, "≤ "+strconv.FormatFloat(*fd.Maximum, 'g', -1, 64))
	}
	if fd.Default != nil {
		hints = append(hints, fmt.Sprintf("default %v", fd.Default))
	}
	label := fd.Label()
	if fd.Required {
		label += " *"
	}
	if len(hints) > 0 {
		label += " (" + strings.Join(hints, ", ") + ")"
	}
	fmt.Fprintf(w, "%s: ", label)
}

// send sends the answer.
func (f *formPrompt) send() error {
	req := model.ChatAnswerRequest{Conversation: f.s.conv, InputID: f.in.InputID, Action: f.action}
	if f.action == model.InputAccept {
		req.Content = f.content
	}
	return retryNotFound(f.s, func(ctx context.Context) error {
		_, err := f.s.c.ChatAnswer(ctx, req)
		return err
	})
}
