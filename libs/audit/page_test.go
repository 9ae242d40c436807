package audit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// TestReadPageBoundsAndContinues: a page stops after max records and the
// next one continues from its last sequence; together they verify like one
// read, and each chain's summary names its last stream sequence.
func TestReadPageBoundsAndContinues(t *testing.T) {
	nc, js := bed(t)
	kp, pub := newKey(t)
	w := writer(t, nc, "runner", kp)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 5 {
		if err := w.Write(ctx, prefix+".events.call.x", event(i)); err != nil {
			t.Fatal(err)
		}
	}
	keys := Keys{pub: {Name: "runner", Role: "runner"}}
	v := NewVerifier(keys, VerifyOptions{})
	from, pages := From{}, 0
	for {
		p, err := ReadPage(ctx, js, from, 2, 5*time.Second, v.Add)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if pages == 1 {
			v.SetFromStart(p.FromStart)
			if !p.FromStart || p.Read != 2 || p.Last != 2 || p.End != 5 || p.Complete() {
				t.Fatalf("first page %+v", p)
			}
		}
		if p.Complete() {
			break
		}
		from = From{Seq: p.Last + 1}
	}
	rep := v.Report()
	if pages != 3 || !rep.OK() || rep.Records != 5 || len(rep.Chains) != 1 || rep.Chains[0].LastStreamSeq != 5 || rep.Chains[0].Last != 5 {
		t.Fatalf("%d pages: %+v", pages, rep)
	}
	if _, bad := rep.FirstProblem(rep.Chains[0].Chain); bad {
		t.Fatal("a problem in a sound chain")
	}
	// Past the end: an empty, complete page.
	if p, err := ReadPage(ctx, js, From{Seq: 6}, 2, time.Second, v.Add); err != nil || p.Read != 0 || !p.Complete() {
		t.Fatalf("page past the end: %+v, %v", p, err)
	}
}

// TestFirstProblemNamesTheChainsFault: of two chains, only the altered one
// has a first problem, and it is the altered record.
func TestFirstProblemNamesTheChainsFault(t *testing.T) {
	b := bundleOf(t, 4)
	var rec Record
	if err := json.Unmarshal(b.Entries[2].Data, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Events[0].Event = []byte(`{"altered":true}`)
	b.Entries[2].Data, _ = json.Marshal(rec)
	rep := b.Verify()
	p, ok := rep.FirstProblem(rec.Chain)
	if !ok || p.Kind != Altered || p.Seq != rec.Seq || p.StreamSeq != b.Entries[2].StreamSeq {
		t.Fatalf("first problem of %s: %+v %v (report %+v)", rec.Chain, p, ok, rep)
	}
	if _, ok := rep.FirstProblem("runner.nobody"); ok {
		t.Fatal("a problem for a chain that is not there")
	}
}

// TestSeedKeysAreTheServicesPublicKeys: the seeds of a data dir give the
// service identities' public keys; an agent's seed is left out.
func TestSeedKeysAreTheServicesPublicKeys(t *testing.T) {
	dir := t.TempDir()
	want := Keys{}
	for _, name := range []string{"runner", "gateway", "agent-a1"} {
		kp, _ := nkeys.CreateUser()
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		if err := os.WriteFile(filepath.Join(dir, name+".nk"), seed, 0o600); err != nil {
			t.Fatal(err)
		}
		if name != "agent-a1" {
			want[pub] = Identity{Name: name, Role: name}
		}
	}
	got, err := SeedKeys(dir)
	if err != nil || len(got) != len(want) {
		t.Fatalf("%v, %v; want %v", got, err, want)
	}
	for k, id := range want {
		if got[k] != id {
			t.Fatalf("key %s: %+v, want %+v", k, got[k], id)
		}
	}
}
