package loop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/conversation"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// BenchmarkTurnStep measures what the turn engine adds around a real tool
// call, as a ratio against the same call made directly.
//
// Setup (outside the timer, once): as TestRealTools, a runner running the
// go-sdk test MCP server "tm", the conversation log on its JetStream, and an
// llmtest model (OpenAI provider, answering at once, no delay).
//
// Each iteration is one paired round (the order alternates between rounds so
// that neither side always runs on a warmer cache):
//
//   - turn: eng.RunTurn on a new conversation, whose scripted model makes one
//     tm__echo call (over the bus through loop.ClientTools) and then gives
//     the final answer: 2 model steps, 1 tool call, the catalog listing and
//     the log appends (user_message, model_step, tool_result, model_step,
//     turn_end);
//   - direct call: the same tm__echo call with libs/client (client.Call).
//
// Reported metrics (means over the b.N rounds):
//
//   - turn-µs/op: the wall time of one turn;
//   - direct-call-µs/op: the wall time of one direct client.Call;
//   - overhead-µs/step: (turn - direct call) / 2, i.e. what the engine costs
//     per model step once the tool call itself is taken out: the model
//     request and its streamed reply over HTTP, the catalog listing, the log
//     appends and the engine's own work, split evenly over the 2 steps;
//   - turn/direct-call: turn-µs/op divided by direct-call-µs/op.
//
// ns/op is the time of a whole round (turn + direct call + the scripting of
// the model's replies).
func BenchmarkTurnStep(b *testing.B) {
	if testing.Short() {
		b.Skip("builds and runs a test MCP server")
	}
	bin, cleanup, err := runnertest.BuildTestServer()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cleanup)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := runnertest.Start(b, runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		StartTimeout: 10 * time.Second, Logger: quiet})
	e.Put(b, runnertest.Binary("tm", bin, "-name", "tm"))
	e.WaitState(b, "tm", model.StateRunning, 15*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	l, err := conversation.Open(ctx, e.JS, conversation.Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := llmtest.Start(b, "sk-test")
	ev := &events{}
	eng := loop.New(loop.Deps{Log: l, Tools: loop.ClientTools{C: e.Client}, Model: newModel, Publish: ev.publish, CallTimeout: 10 * time.Second})
	prof := model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: srv.OpenAIBaseURL(),
		ToolFilter: model.ChatToolFilter{Include: []string{"tm__echo"}}}
	const message = "over the bus"
	args := json.RawMessage(`{"message":"` + message + `"}`)

	turn := func(conv string) {
		srv.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", string(args))), llmtest.Text("it echoed"))
		done, err := eng.RunTurn(ctx, conv, prof, "echo something")
		if err != nil || done.Reason != model.TurnFinal || done.Steps != 2 {
			b.Fatalf("turn %s: %+v %v", conv, done, err)
		}
	}
	direct := func() {
		res, err := e.Client.Call(ctx, "tm", "echo", args, nil)
		if err != nil || !strings.Contains(string(res), message) {
			b.Fatalf("direct call: %s %v", res, err)
		}
	}
	// Warm up both paths (connections, the model client, the server's first
	// call) before measuring, and check the turn really called the tool.
	turn("bench-warmup")
	direct()
	if body := string(srv.Last().Body); !strings.Contains(body, message) {
		b.Fatalf("the real result did not go back to the model: %s", body)
	}

	var turnTime, directTime time.Duration
	i := 0
	for b.Loop() {
		conv := fmt.Sprintf("bench-%d", i)
		if i%2 == 0 {
			t0 := time.Now()
			turn(conv)
			t1 := time.Now()
			direct()
			turnTime += t1.Sub(t0)
			directTime += time.Since(t1)
		} else {
			t0 := time.Now()
			direct()
			t1 := time.Now()
			turn(conv)
			directTime += t1.Sub(t0)
			turnTime += time.Since(t1)
		}
		i++
	}
	if i == 0 {
		return
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(i) }
	turnUS, directUS := us(turnTime), us(directTime)
	b.ReportMetric(turnUS, "turn-µs/op")
	b.ReportMetric(directUS, "direct-call-µs/op")
	b.ReportMetric((turnUS-directUS)/2, "overhead-µs/step")
	b.ReportMetric(turnUS/directUS, "turn/direct-call")
}
