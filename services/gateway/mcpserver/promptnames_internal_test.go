package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// The prompt names learnt from lists stay bounded: a server that names its
// prompts afresh at every list (a few thousand a page) would otherwise grow
// the gateway's memory with every client's prompts/list, for good.
func TestLearntPromptNamesBounded(t *testing.T) {
	a := newAggregator(t)
	n := 0
	sub, err := a.nc.Subscribe(bus.NewSubjects("").RPC("churn"), func(m *nats.Msg) {
		var res mcp.ListPromptsResult
		for range 1000 {
			n++
			res.Prompts = append(res.Prompts, &mcp.Prompt{Name: fmt.Sprintf("p%d", n)})
		}
		data, _ := json.Marshal(res)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	for range 30 {
		if _, err := a.listPromptsOf(context.Background(), "churn"); err != nil {
			t.Fatal(err)
		}
	}
	learnt := 0
	a.prompts.Range(func(_, _ any) bool { learnt++; return true })
	if learnt > promptNamesMax {
		t.Fatalf("%d prompt names learnt, bound %d", learnt, promptNamesMax)
	}
	// The names of the last list resolve from what was learnt.
	if _, ok := a.prompts.Load(fmt.Sprintf("churn__p%d", n)); !ok {
		t.Fatal("the last listed prompt was not learnt")
	}
}
