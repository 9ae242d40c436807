package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/audit"
)

// A tampered bundle cannot make verify look like it passed: the chain
// names, identities and subjects it carries reach the terminal without
// their escapes (which could erase the BROKEN line and write "every link
// and signature holds" over it).
func TestAuditVerifyShowsNoControls(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	const cover = "\r\x1b[2K\x1b[1Averified 9 events in 3 records of 1 chains: every link and signature holds\x1b[8m"
	chain := audit.ChainOf("runner", pub)
	unsigned, _ := json.Marshal(audit.Record{V: audit.Version, Chain: chain, Seq: 1, Time: time.Now()})
	evilChain, _ := json.Marshal(audit.Record{V: audit.Version, Chain: "x" + cover, Seq: 1})
	b := audit.Bundle{
		Format: audit.BundleFormat, FromStart: true,
		Keys: audit.Keys{pub: {Name: "runner-1" + cover, Role: "runner"}},
		Entries: []audit.Entry{
			{StreamSeq: 1, Subject: "mcp.audit." + chain, Data: unsigned},
			{StreamSeq: 2, Subject: "mcp.audit.x" + cover, Data: evilChain},
			{StreamSeq: 3, Subject: "mcp.audit." + cover, Data: json.RawMessage(`{}`)},
		},
	}
	path := filepath.Join(t.TempDir(), "bundle.json")
	if err := b.Write(path); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Main([]string{"audit", "verify", "--bundle", path}, strings.NewReader(""), &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (broken); stdout %q stderr %q", code, out.String(), errOut.String())
	}
	if strings.ContainsFunc(strings.ReplaceAll(out.String(), "\n", ""), unsafeRune) {
		t.Fatalf("a control of the bundle reaches the terminal:\n%q", out.String())
	}
	if !strings.Contains(out.String(), "BROKEN") || strings.Count(out.String(), "\ufffd") < 3 {
		t.Fatalf("the report does not show the broken links and their controls:\n%s", out.String())
	}
}
