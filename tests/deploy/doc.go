// Package deploy checks the container deployment (docker-compose.yml,
// deploy/compose.docker-servers.yml, deploy/docker, deploy/nats/cluster,
// deploy/vault) without a Docker engine: the compose files are loaded and
// validated with compose-go, and the deployment they describe is run on this
// machine — the identities job's command, a 3-node NATS cluster started from
// the node configurations as nats-server parses them, Vault configured as
// vault-init does, and each service as its own process with the environment,
// identity and mounts its container gets (container paths mapped to one
// directory per volume) — then used end to end.
package deploy
