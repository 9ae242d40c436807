package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/mcpbus/mcpbus/libs/secretfile"
)

// BundleFormat names the export format.
const BundleFormat = "mcpbus-audit-bundle/1"

// Bundle is an export of the audit stream that verifies offline: the
// records as stored and the public keys of the writers
// (schemas/audit-bundle.json).
type Bundle struct {
	Format     string    `json:"format"`
	ExportedAt time.Time `json:"exported_at"`
	// FromStart: the entries begin at the stream's first record ever.
	FromStart bool `json:"from_start"`
	// MaxAgeSeconds is the stream's max age when exported (0: none or
	// unknown). As an anchor (verify --anchor) it is the retention its
	// records are held to: the stream's own could have been shortened since.
	MaxAgeSeconds int64   `json:"max_age_seconds,omitempty"`
	Keys          Keys    `json:"keys"`
	Entries       []Entry `json:"entries"`
}

// ReadBundle decodes a bundle.
func ReadBundle(r io.Reader) (*Bundle, error) {
	var b Bundle
	if err := json.NewDecoder(r).Decode(&b); err != nil {
		return nil, fmt.Errorf("audit bundle: %w", err)
	}
	if b.Format != BundleFormat {
		return nil, fmt.Errorf("audit bundle: format %q, want %s", b.Format, BundleFormat)
	}
	return &b, nil
}

// Verify checks the bundle against its own keys.
func (b *Bundle) Verify() Report { return b.VerifyAnchored(nil, 0) }

// VerifyAnchored is Verify, each chain's head in anchors (an earlier
// export's) still stored unchanged unless older than retention when b was
// exported.
func (b *Bundle) VerifyAnchored(anchors map[string]Anchor, retention time.Duration) Report {
	v := NewVerifier(b.Keys, VerifyOptions{FromStart: b.FromStart, Anchors: anchors, Retention: retention, Now: b.ExportedAt})
	for _, e := range b.Entries {
		v.Add(e)
	}
	return v.Report()
}

// Write writes the bundle to path (0600, replacing it: an older file's
// mode is not kept, and a symlink there is replaced, not followed).
func (b *Bundle) Write(path string) error {
	data, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("audit bundle: %w", err)
	}
	if err := secretfile.Write(path, append(data, '\n')); err != nil {
		return fmt.Errorf("audit bundle: %w", err)
	}
	return nil
}
