// Package tasks tests durable tasks against runners running as their own
// processes on a NATS cluster (services/runner/runnertest): the owner of a
// task's server is SIGKILLed mid-call, and the task's fate follows its
// tool's idempotentHint. The bus, REST and principal behaviour is tested in
// services/runner/runner and tests/gateway.
package tasks
