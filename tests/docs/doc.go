// Package docs checks the documentation against itself and the code: every
// relative link of README.md and docs/ resolves (file and heading), the
// README stays the short front page, docs/security.md names the exec
// policy the runner enforces, and claims a reader acts on match the code
// (the settings table of docs/operating.md, its one-service-per-process
// example, the free disk the streams need, the gateway's resource error, and
// the bounds, defaults, exec policy and cited tests of docs/security.md and
// docs/principals.md).
package docs
