package cli

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/service"
)

// newAuditCmd verifies and exports the tamper-evident audit trail.
func newAuditCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Verify or export the tamper-evident audit trail (signed, hash-chained records)",
		Long: `Every audited event (tool calls, tool_changed and tool_reviewed, config changes, credential
resolves, chat audit events, the gateway's OAuth outcomes and its events.gateway.* of keys,
token revocations and approvals) is also appended to the chain of the service identity that
wrote it, in the append-only stream MCP_AUDIT: each record carries the hash of its chain's previous record and
an ed25519 signature by the writer's nkey (docs/security.md, "Tamper-evident audit").

The writers' public keys are those of the bus identities: by default read from the seeds of a
local mcpbus up (<data dir>/nats), or given with --keys as mcpbus identities prints them
(MCPBUS_<NAME>_NKEY=U…).`,
	}
	cmd.AddCommand(newAuditVerifyCmd(g), newAuditExportCmd(g))
	return cmd
}

// auditSource are the flags that choose what is read.
type auditSource struct {
	from string
	keys string
}

func (s *auditSource) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.from, "from", "", "start at this stream sequence (a number) or time (RFC 3339); a chain's first record read is then its anchor")
	cmd.Flags().StringVar(&s.keys, "keys", "", "the writers' public keys, as mcpbus identities prints them (env MCPBUS_AUDIT_KEYS; default: the seeds of a local mcpbus up)")
}

// keyFile is --keys, else MCPBUS_AUDIT_KEYS (the gateway's variable for
// the same file; compose sets it for the cli service).
func (s *auditSource) keyFile() string { return cmp.Or(s.keys, os.Getenv("MCPBUS_AUDIT_KEYS")) }

func (s *auditSource) start() (audit.From, error) {
	if s.from == "" {
		return audit.From{}, nil
	}
	if n, err := strconv.ParseUint(s.from, 10, 64); err == nil {
		return audit.From{Seq: n}, nil
	}
	t, err := time.Parse(time.RFC3339, s.from)
	if err != nil {
		return audit.From{}, apierr.New(apierr.Validation, "--from takes a stream sequence or an RFC 3339 time").WithField("from")
	}
	return audit.From{Time: t}, nil
}

func roleNames() []string {
	var out []string
	for _, r := range access.ServiceRoles() {
		out = append(out, string(r))
	}
	return out
}

// trustedKeys are the writers' public keys: --keys, else the local seeds.
func (s *auditSource) trustedKeys() (audit.Keys, error) {
	if file := s.keyFile(); file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fileFlagError("keys", err)
		}
		defer f.Close()
		keys, err := audit.ReadKeys(f, roleNames())
		if err != nil {
			return nil, fileFlagError("keys", err)
		}
		return keys, nil
	}
	dir := filepath.Join(cmp.Or(os.Getenv("MCPBUS_DATA_DIR"), service.DefaultDataDir), "nats")
	keys, err := audit.SeedKeys(dir)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, apierr.New(apierr.Validation, "no public keys: give --keys (mcpbus identities prints them), or run where mcpbus up keeps "+dir).WithField("keys")
	}
	return keys, nil
}

// read passes the records of the bus to fn, in stream order.
func (s *auditSource) read(cmd *cobra.Command, g *globals, fn func(audit.Entry)) (audit.Page, error) {
	from, err := s.start()
	if err != nil {
		return audit.Page{}, err
	}
	nc, _, err := g.connect(cmd.Context())
	if err != nil {
		return audit.Page{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(g.timeout))
	if err != nil {
		return audit.Page{}, err
	}
	page, err := audit.ReadPage(cmd.Context(), js, from, 0, g.timeout, fn)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return page, apierr.Wrap(apierr.NotFound, "no audit stream on this bus yet", err)
	}
	return page, g.refused(err)
}

// anchors are the chains' heads of the earlier export at path, taken from
// its records signed by keys (--keys), else by its own keys: a bundle kept
// apart is as trusted as the keys it holds; and the stream's max age then
// (0: unknown), which the stream's own could have been shortened below.
func (s *auditSource) anchors(path string) (map[string]audit.Anchor, time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fileFlagError("anchor", err)
	}
	b, err := audit.ReadBundle(f)
	_ = f.Close()
	if err != nil {
		return nil, 0, fileFlagError("anchor", err)
	}
	keys := b.Keys
	if s.keyFile() != "" {
		if keys, err = s.trustedKeys(); err != nil {
			return nil, 0, err
		}
	}
	return audit.AnchorsOf(b, keys), time.Duration(b.MaxAgeSeconds) * time.Second, nil
}

func newAuditVerifyCmd(g *globals) *cobra.Command {
	var (
		src    auditSource
		bundle string
		anchor string
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check every audit chain and signature; name the first broken link",
		Long: `verify reads the audit stream (or, with --bundle, a file audit export wrote, offline,
against the keys it holds, or those of --keys) and checks every chain: each record's
signature by its writer's key, its link to the previous record, and the order and
completeness of the chain. The first
broken link is named by its stream sequence, chain and record, with what is wrong: altered,
missing, reordered, bad signature or unknown key. Exit status 1 when a link is broken.

Nothing links to a chain's newest records: removing them, or a whole chain, breaks no link.
--anchor <earlier export>, kept apart from the bus, checks that each chain's head it holds is
still stored, unchanged, unless it is older than the stream's max age.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rep audit.Report
			var (
				anchors   map[string]audit.Anchor
				retention time.Duration // the anchor's
			)
			if anchor != "" {
				if src.from != "" {
					return apierr.New(apierr.Validation, "--anchor checks the chains from the stream's first record: no --from").WithField("from")
				}
				var err error
				if anchors, retention, err = src.anchors(anchor); err != nil {
					return err
				}
			}
			if bundle != "" {
				if src.from != "" {
					return apierr.New(apierr.Validation, "--bundle carries its records: no --from").WithField("from")
				}
				f, err := os.Open(bundle)
				if err != nil {
					return fileFlagError("bundle", err)
				}
				b, err := audit.ReadBundle(f)
				_ = f.Close()
				if err != nil {
					return fileFlagError("bundle", err)
				}
				if src.keyFile() != "" { // keys held apart from the bundle, which could swap its own
					if b.Keys, err = src.trustedKeys(); err != nil {
						return err
					}
				} else {
					// Whoever rewrote the bundle could have signed it with keys of their own.
					fmt.Fprintln(g.stderr, "note: checked against the bundle's own public keys; give --keys (kept apart) to trust no key the bundle carries")
				}
				// The anchor's max age, else the bundle's: an anchored
				// record older than it when b was exported may have left.
				rep = b.VerifyAnchored(anchors, cmp.Or(retention, time.Duration(b.MaxAgeSeconds)*time.Second))
			} else {
				keys, err := src.trustedKeys()
				if err != nil {
					return err
				}
				// Checked as read: the verifier keeps a few hashes per record, not the records.
				v := audit.NewVerifier(keys, audit.VerifyOptions{Anchors: anchors})
				page, err := src.read(cmd, g, v.Add)
				if err != nil {
					return err
				}
				v.SetFromStart(page.FromStart)
				v.SetRetention(cmp.Or(retention, page.MaxAge))
				v.SetStream(page.Start, page.Floor)
				v.SetUnprotected(page.Unprotected)
				rep = v.Report()
			}
			if g.json {
				if err := g.printJSON(rep); err != nil {
					return err
				}
			} else {
				printAuditReport(g, rep)
			}
			if !rep.OK() {
				return silentExit(1)
			}
			return nil
		},
	}
	src.register(cmd)
	cmd.Flags().StringVar(&anchor, "anchor", "", "an earlier export (audit export), kept apart from the bus: each chain's head it holds must still be stored, unchanged (the newest records of a chain, or a whole chain, can be removed without breaking a link)")
	cmd.Flags().StringVar(&bundle, "bundle", "", "verify this bundle (mcpbus audit export) offline instead of the bus; with --keys, against those keys instead of the bundle's")
	return cmd
}

// printAuditReport prints rep; chain names, identities and subjects come
// from the records (or a bundle's keys), which whoever tampered with them
// wrote: an escape sequence could erase the BROKEN line and print "every
// link and signature holds" over it, so they go through printable.
func printAuditReport(g *globals, rep audit.Report) {
	for _, c := range rep.Chains {
		fmt.Fprintf(g.stdout, "chain %s (%s): records %d to %d\n", printable(c.Chain), printable(cmp.Or(c.Identity, "unknown identity")), c.First, c.Last)
	}
	if rep.OK() {
		fmt.Fprintf(g.stdout, "verified %d events in %d records of %d chains: every link and signature holds\n", rep.Events, rep.Records, len(rep.Chains))
		return
	}
	fmt.Fprintf(g.stdout, "BROKEN: first broken link at %s\n", printable(rep.Problems[0].String()))
	for _, p := range rep.Problems[1:min(len(rep.Problems), 20)] {
		fmt.Fprintf(g.stdout, "  also: %s\n", printable(p.String()))
	}
	if len(rep.Problems) > 20 {
		fmt.Fprintf(g.stdout, "  … %d problems in all\n", len(rep.Problems))
	}
}

func newAuditExportCmd(g *globals) *cobra.Command {
	var (
		s   auditSource
		out string
	)
	cmd := &cobra.Command{
		Use:   "export --out <file>",
		Short: "Write the audit records and the writers' public keys to a bundle that verifies offline",
		Long: `export writes the audit stream's records (from --from on), exactly as stored, and the
writers' public keys into one JSON file (0600), which mcpbus audit verify --bundle checks
without the bus. It does not verify them first: verify the bundle.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return apierr.New(apierr.Validation, "--out is required").WithField("out")
			}
			keys, err := s.trustedKeys()
			if err != nil {
				return err
			}
			var entries []audit.Entry
			page, err := s.read(cmd, g, func(e audit.Entry) { entries = append(entries, e) })
			if err != nil {
				return err
			}
			b := audit.Bundle{Format: audit.BundleFormat, ExportedAt: time.Now().UTC(), FromStart: page.FromStart,
				MaxAgeSeconds: int64(page.MaxAge / time.Second), Keys: keys, Entries: entries}
			if err := b.Write(out); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "wrote %d records and %d public keys to %s\n", len(entries), len(keys), out)
			return nil
		},
	}
	s.register(cmd)
	cmd.Flags().StringVar(&out, "out", "", "the bundle file to write")
	return cmd
}

// fileFlagError is a file named by --flag that cannot be read or is not
// what the flag takes. The cause is never serialised, so the message says
// it (it said only "--keys").
func fileFlagError(flag string, err error) error {
	return apierr.Wrap(apierr.Validation, "--"+flag+": "+err.Error(), err).WithField(flag)
}
