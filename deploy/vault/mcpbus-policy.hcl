# The only paths the mcpbus credential service needs in Vault: its own
# records under the KV v2 mount (default "secret"). Nothing else is readable.
path "secret/data/mcpbus/*" {
  capabilities = ["create", "read", "update", "delete"]
}

path "secret/metadata/mcpbus/*" {
  capabilities = ["read", "delete", "list"]
}

# Renew its own token (the lifetime watcher) and look it up.
path "auth/token/renew-self" {
  capabilities = ["update"]
}

path "auth/token/lookup-self" {
  capabilities = ["read"]
}
