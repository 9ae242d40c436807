# The Vault server of docker-compose.yml: file storage on the vault-data volume,
# plain HTTP on the compose network only (the port is not published).
# For production, give the listener a certificate (tls_cert_file, tls_key_file),
# set VAULT_ADDR=https://... and VAULT_CACERT for the credential service, and
# replace the Shamir unseal of deploy/vault/init.sh by auto-unseal (seal "transit"
# or a cloud KMS) or by key holders unsealing by hand.
storage "file" {
  path = "/vault/file"
}

listener "tcp" {
  address     = "0.0.0.0:8200"
  tls_disable = true
}

api_addr      = "http://vault:8200"
ui            = false
# Containers seldom have IPC_LOCK; swap should be off on the host instead.
disable_mlock = true
