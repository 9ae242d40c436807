package runner

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretscan"
)

// The secret scan leaves out a result's long base64 image, audio and blob
// data, and nothing else: a text, a short or non-base64 data value (a
// secret where data belongs) and data of another content type are
// scanned. A secret in the result's text is still redacted in place.
func TestBinaryDataLeftOut(t *testing.T) {
	raw := make([]byte, 3000)
	_, _ = rand.Read(raw)
	img := base64.StdEncoding.EncodeToString(raw)
	const aws = "AKIAZ3MQXP7R2HKW5Y4N"
	result := `{"content":[` +
		`{"type":"text","text":"key ` + aws + ` here"},` +
		`{"type":"image","data":"` + img + `","mimeType":"image/png"},` +
		`{"type":"audio","mimeType":"audio/wav","data":"` + img[:400] + `"},` +
		`{"type":"resource","resource":{"uri":"file:///a.bin","blob":"` + img[:1000] + `"}},` +
		`{"type":"image","data":"` + aws + `","mimeType":"image/png"},` +
		`{"type":"image","data":"` + strings.Repeat("x", 300) + ` ` + aws + `","mimeType":"image/png"},` +
		`{"type":"text","text":"` + img[:500] + `"}` +
		`],"isError":false}`
	spans := binaryData([]byte(result))
	want := []string{`"` + img + `"`, `"` + img[:400] + `"`, `"` + img[:1000] + `"`}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d: %v", len(spans), len(want), spans)
	}
	for i, s := range spans {
		if got := result[s.Start:s.End]; got != want[i] {
			t.Errorf("span %d holds %.40q…, want %.40q…", i, got, want[i])
		}
	}

	g, err := newSecretGuard()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &model.McpConfig{}
	res := &callReply{data: []byte(result)}
	g.checkResult(cfg, res)
	out := string(res.data)
	if strings.Contains(out, aws) {
		t.Errorf("the key is still in the result (in text, in a short data and in a data with a space)")
	}
	if n := strings.Count(out, secretscan.Marker("aws-access-token")); n != 3 {
		t.Errorf("%d redactions, want 3", n)
	}
	if !strings.Contains(out, img) {
		t.Error("the image data was changed")
	}
}

func BenchmarkResultWithImage(b *testing.B) {
	raw := make([]byte, 192*1024)
	_, _ = rand.Read(raw)
	result := []byte(`{"content":[{"type":"text","text":"a screenshot"},{"type":"image","data":"` +
		base64.StdEncoding.EncodeToString(raw) + `","mimeType":"image/png"}]}`)
	sc, err := secretscan.Default()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		skip func() []secretscan.Span
	}{
		{"whole", func() []secretscan.Span { return nil }},
		{"skipping-data", func() []secretscan.Span { return binaryData(result) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(result)))
			for b.Loop() {
				sc.ScanSkipping(result, nil, c.skip())
			}
		})
	}
}

// An rpc reply's long base64 data is left out as a result's is: the blobs
// of a resources/read, the image data of a prompts/get's messages; a text
// and a short blob (a secret where data belongs) are scanned, and the
// lists and completions hold no data.
func TestReplyBinaryLeftOut(t *testing.T) {
	raw := make([]byte, 600)
	_, _ = rand.Read(raw)
	blob := base64.StdEncoding.EncodeToString(raw)
	const aws = "AKIAZ3MQXP7R2HKW5Y4N"
	read := `{"contents":[{"uri":"a","text":"key ` + aws + `"},{"uri":"b","blob":"` + blob + `"},{"uri":"c","blob":"` + aws + `"}]}`
	prompt := `{"messages":[{"role":"user","content":{"type":"image","mimeType":"image/png","data":"` + blob + `"}},{"role":"user","content":{"type":"text","text":"` + blob + `"}}]}`
	for _, c := range []struct{ method, reply string }{{"resources/read", read}, {"prompts/get", prompt}} {
		spans := replyBinary(c.method, []byte(c.reply))
		if len(spans) != 1 || c.reply[spans[0].Start:spans[0].End] != `"`+blob+`"` {
			t.Errorf("%s: spans %v, want the one blob", c.method, spans)
		}
	}
	if spans := replyBinary("completion/complete", []byte(`{"completion":{"values":["`+blob+`"]}}`)); spans != nil {
		t.Errorf("completion/complete: spans %v, want none", spans)
	}
}
