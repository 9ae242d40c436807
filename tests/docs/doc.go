// Package docs checks the documentation against itself and the code: every
// relative link of README.md and docs/ resolves (file and heading), the
// README stays the short front page, and docs/security.md names the exec
// policy the runner enforces.
package docs
