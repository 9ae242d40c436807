package model_test

import (
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
)

func TestLooksSecret(t *testing.T) {
	cases := []struct {
		name string
		want bool
	}{
		// What the substring rules already caught.
		{"GITHUB_TOKEN", true},
		{"OPENAI_API_KEY", true},
		{"Authorization", true},
		{"Cookie", true},
		{"GITHUB_PAT", true},
		{"DB_PASSWORD", true},
		{"AWS_SECRET_ACCESS_KEY", true},
		// Words added: passwords.
		{"DB_PASS", true},
		{"SMTP_PASS", true},
		{"PASS", true},
		{"redis-pass", true},
		{"dbPass", true},
		{"MYSQL_PWD", true},
		{"PG_PASSWD", true},
		{"GPG_PASSPHRASE", true},
		{"KEYSTORE_PASS_WORD", true},
		{"LOCK_PASSCODE", true},
		// Credentials, private keys.
		{"CREDENTIALS", true},
		{"SERVICE_CREDS", true},
		{"GOOGLE_APPLICATION_CREDENTIALS", true},
		{"SSH_PRIVATE_KEY", true},
		{"x-private-key", true},
		{"privateKey", true},
		// Cookies and sessions.
		{"SESSION_COOKIE", true},
		{"X-Session-Cookie", true},
		{"AUTH_COOKIES", true},
		{"SESSION", true},
		{"CLAUDE_SESSION", true},
		{"X-Session-Id", true},
		{"SESSION_KEY", true},
		{"sessionId", true},
		{"SESSIONID", true},
		{"session_secret", true},
		// DSNs and connection strings.
		{"SENTRY_DSN", true},
		{"DSN", true},
		{"DATABASE_DSN_URL", true},
		{"AZURE_STORAGE_CONNECTION_STRING", true},
		{"connectionString", true},
		{"DB_CONN_STR", true},
		{"MONGO_CONNSTR", true},

		// Not secrets: the words inside other words, or a different meaning.
		{"PASSTHROUGH", false},
		{"PASSPORT_COUNTRY", false},
		{"PASS_THROUGH", false},
		{"BYPASS_PROXY", false},
		{"COMPASS_URL", false},
		{"PWD", false},
		{"OLDPWD", false},
		{"PWD_DIR", false},
		{"COOKIE_DOMAIN", false},
		{"COOKIE_SECURE", false},
		{"SESSION_TIMEOUT", false},
		{"SESSION_TTL", false},
		{"MAX_SESSIONS", false},
		{"SESSIONS_DIR", false},
		{"DSNAME", false},
		{"MSDSN_HOST", false},
		{"CONNECTION_TIMEOUT", false},
		{"PRIVATE_MODE", false},
		{"FILE_PATH", false},
		{"PATH", false},
		{"HOME", false},
		{"LOG_LEVEL", false},
		{"Content-Type", false},
		{"PUBLIC_URL", false},
		{"", false},
	}
	for _, c := range cases {
		if got := model.LooksSecret(c.name); got != c.want {
			t.Errorf("LooksSecret(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSecretURL(t *testing.T) {
	cases := []struct {
		value string
		want  bool
	}{
		{"https://api.example.com/v1?api_key=sk-123", true},
		{"https://api.example.com/v1?apikey=sk-123", true},
		{"https://api.example.com/v1?foo=1&access_token=abc", true},
		{"https://maps.example.com/js?key=AIzaSy123", true},
		{"https://example.com/?token=abc", true},
		{"https://example.com/?Token=abc", true},
		{"https://example.com/?secret=abc", true},
		{"https://example.com/?client_secret=abc", true},
		{"https://example.com/?password=abc", true},
		{"https://example.com/?pass=abc", true},
		{"https://example.com/?auth=abc", true},
		{"https://example.com/?sig=abc&se=2030-01-01", true},
		{"https://bucket.s3.amazonaws.com/o?X-Amz-Signature=abc&X-Amz-Credential=k", true},
		{"https://example.com/?signature=abc", true},
		{"https://example.com/?sessionId=abc", true},
		{"https://example.com/cb#access_token=abc&token_type=bearer", true},
		{"postgres://user:hunter2@db:5432/app?sslmode=disable", true},
		{"  https://example.com/?token=abc  ", true},
		{"wss://stream.example.com/ws?apiKey=abc", true},
		{"https://example.com/?a=1;token=abc", true}, // a malformed part does not hide the rest

		{"https://example.com/path", false},
		{"https://example.com/?page=2&sort=desc", false},
		{"https://example.com/?token=", false},
		{"https://example.com/?keyword=mcp", false},
		{"https://example.com/?monkey=1", false},
		{"https://example.com/?passthrough=1", false},
		{"https://example.com/#section-2", false},
		{"postgres://user@db:5432/app", false},
		{"postgres://db:5432/app?sslmode=require", false},
		{"token=abc", false},
		{"api_key=abc", false},
		{"sk-1234567890", false},
		{"/var/run/app?token=abc", false},
		{"", false},
		{"://?token=abc", false},
	}
	for _, c := range cases {
		if got := model.SecretURL(c.value); got != c.want {
			t.Errorf("SecretURL(%q) = %v, want %v", c.value, got, c.want)
		}
	}
}
