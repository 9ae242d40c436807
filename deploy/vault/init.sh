#!/bin/sh
# vault-init of docker-compose.yml: makes the Vault server usable by the mcpbus
# credential service, then keeps it unsealed. Runs in the hashicorp/vault image
# (its vault CLI and busybox), as root, with VAULT_ADDR pointing at the server.
#
#   init.sh watch   initialise once, unseal, configure, then unseal again whenever
#                   the server comes back sealed (a restart); the compose default
#   init.sh once    the same without the loop; with MCPBUS_ROTATE_SECRET_ID=1 it
#                   also replaces the credential service's AppRole secret id:
#                   docker compose run --rm -e MCPBUS_ROTATE_SECRET_ID=1 vault-init once
#
# What it does, every time (each step is idempotent):
#   1. initialise Vault if it is not: one Shamir key share, threshold 1. The unseal key
#      and the root token go to $KEYS_DIR (the vault-init-keys volume, which only this
#      container mounts). TRUST DECISION: whoever can read that volume (root on the
#      Docker host) can unseal Vault and read every secret. For a real deployment use
#      auto-unseal (seal "transit" or a cloud KMS in vault.hcl) or key holders with
#      several shares (vault operator init -key-shares=5 -key-threshold=3 run by hand,
#      then vault operator unseal by each holder), revoke the root token once configured
#      (vault token revoke <root>) and run this script with VAULT_TOKEN of an admin.
#   2. unseal it with the stored key if it is sealed;
#   3. enable KV v2 at secret/ and the AppRole auth method, (re)load the policy
#      deploy/vault/mcpbus-policy.hcl as "mcpbus", (re)write the AppRole role
#      mcpbus-credential (tokens of 1 h, renewed up to 24 h, then a new login);
#   4. write the role's role_id and a secret_id (made once, or again on rotation) to
#      $APPROLE_DIR/credential/ (0600, owned by the credential service's uid): the
#      volume subpath the credential container alone mounts, read through
#      MCPBUS_VAULT_ROLE_ID_FILE and MCPBUS_VAULT_SECRET_ID_FILE at each login, so a
#      rotated secret id is used from the next login on without a restart.
set -eu

MODE=${1:-watch}
KEYS_DIR=${KEYS_DIR:-/vault-init/keys}
APPROLE_DIR=${APPROLE_DIR:-/vault-init/approle}
POLICY_FILE=${POLICY_FILE:-/vault-init/conf/mcpbus-policy.hcl}
ROLE=mcpbus-credential
POLICY=mcpbus
KV_MOUNT=secret
CRED_UID=${CRED_UID:-65532}
CRED_DIR="$APPROLE_DIR/credential"
READY=/tmp/vault-init.ready

: "${VAULT_ADDR:?set VAULT_ADDR}"
umask 077
log() { echo "vault-init: $*" >&2; }

case "$MODE" in
  watch|once) ;;
  *) log "usage: init.sh watch|once"; exit 2 ;;
esac

# status prints "sealed", "unsealed", "uninitialized" or "down".
status() {
  out=$(vault status -format=json 2>/dev/null) && code=0 || code=$?
  if [ "$code" -ne 0 ] && [ "$code" -ne 2 ]; then echo down; return; fi
  if echo "$out" | grep -q '"initialized": *false'; then echo uninitialized; return; fi
  if [ "$code" -eq 2 ]; then echo sealed; else echo unsealed; fi
}

wait_up() {
  while [ "$(status)" = down ]; do log "waiting for Vault at $VAULT_ADDR"; sleep 2; done
}

# put FILE OWNER: stdin to FILE (0600, OWNER), atomically.
put() {
  cat > "$1.new"
  chmod 600 "$1.new"
  chown "$2:$2" "$1.new"
  mv -f "$1.new" "$1"
}

initialise() {
  [ "$(status)" = uninitialized ] || return 0
  log "initialising Vault (1 key share); keys in $KEYS_DIR"
  # The whole answer is kept before anything is parsed: losing it would lose Vault.
  vault operator init -key-shares=1 -key-threshold=1 > "$KEYS_DIR/init.txt"
  sed -n 's/^Unseal Key 1: //p' "$KEYS_DIR/init.txt" | put "$KEYS_DIR/unseal-key" 0
  sed -n 's/^Initial Root Token: //p' "$KEYS_DIR/init.txt" | put "$KEYS_DIR/root-token" 0
  if [ ! -s "$KEYS_DIR/unseal-key" ] || [ ! -s "$KEYS_DIR/root-token" ]; then
    log "could not read the init output (kept in $KEYS_DIR/init.txt)"; exit 1
  fi
}

unseal() {
  [ "$(status)" = sealed ] || return 0
  [ -s "$KEYS_DIR/unseal-key" ] || { log "Vault is sealed and $KEYS_DIR/unseal-key is missing: unseal it by hand"; return 1; }
  log "unsealing Vault"
  # The key goes through a pipe, never an argument: every user of the host
  # reads a process's command line in /proc (and the key alone yields a
  # root token through generate-root).
  tr -d '\r\n' < "$KEYS_DIR/unseal-key" | vault write sys/unseal key=- > /dev/null
}

configure() {
  if [ -z "${VAULT_TOKEN:-}" ]; then
    [ -s "$KEYS_DIR/root-token" ] || { log "no VAULT_TOKEN and no $KEYS_DIR/root-token"; exit 1; }
    VAULT_TOKEN=$(cat "$KEYS_DIR/root-token")
    export VAULT_TOKEN
  fi
  vault secrets list -format=json | grep -q "\"$KV_MOUNT/\"" || vault secrets enable -path="$KV_MOUNT" -version=2 kv
  vault auth list -format=json | grep -q '"approle/"' || vault auth enable approle
  vault policy write "$POLICY" "$POLICY_FILE" > /dev/null
  vault write "auth/approle/role/$ROLE" token_policies="$POLICY" token_ttl=1h token_max_ttl=24h \
    secret_id_ttl=0 secret_id_num_uses=0 > /dev/null

  mkdir -p "$CRED_DIR"
  chown "$CRED_UID:$CRED_UID" "$CRED_DIR"
  chmod 700 "$CRED_DIR"
  vault read -field=role_id "auth/approle/role/$ROLE/role-id" | put "$CRED_DIR/role_id" "$CRED_UID"
  if [ ! -s "$CRED_DIR/secret_id" ] || [ "${MCPBUS_ROTATE_SECRET_ID:-}" = 1 ]; then
    old=$(cat "$KEYS_DIR/secret-id-accessor" 2>/dev/null || true)
    vault write -f -format=json "auth/approle/role/$ROLE/secret-id" > "$KEYS_DIR/secret-id.json"
    sed -n 's/.*"secret_id": *"\([^"]*\)".*/\1/p' "$KEYS_DIR/secret-id.json" | put "$CRED_DIR/secret_id" "$CRED_UID"
    sed -n 's/.*"secret_id_accessor": *"\([^"]*\)".*/\1/p' "$KEYS_DIR/secret-id.json" | put "$KEYS_DIR/secret-id-accessor" 0
    rm -f "$KEYS_DIR/secret-id.json"
    [ -s "$CRED_DIR/secret_id" ] || { log "could not read the new secret id"; exit 1; }
    if [ -n "$old" ]; then
      # The credential service's current token lives on; its next login reads the new file.
      vault write "auth/approle/role/$ROLE/secret-id-accessor/destroy" secret_id_accessor="$old" > /dev/null || true
      log "secret id rotated; the old one is destroyed"
    else
      log "secret id written to $CRED_DIR"
    fi
  fi
  unset VAULT_TOKEN
}

mkdir -p "$KEYS_DIR"
chmod 700 "$KEYS_DIR"
wait_up
initialise
unseal
configure
log "Vault is initialised, unsealed and configured for mcpbus"
touch "$READY"
[ "$MODE" = once ] && exit 0

trap 'exit 0' TERM INT
while :; do
  sleep 5 &
  wait $! || true
  case "$(status)" in
    sealed) unseal || true ;;
    uninitialized) log "Vault lost its data (uninitialized): restore the vault-data volume or reset both volumes"; rm -f "$READY" ;;
    *) ;;
  esac
done
