package model_test

import (
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
)

func TestSecretsPolicyDefaults(t *testing.T) {
	var p model.SecretsPolicy
	if p.ArgumentsPolicy() != model.SecretsBlock || p.ResultsPolicy() != model.SecretsRedact {
		t.Fatalf("defaults %s/%s, want block/redact", p.ArgumentsPolicy(), p.ResultsPolicy())
	}
	p = model.SecretsPolicy{Arguments: model.SecretsOff, Results: model.SecretsBlock}
	if p.ArgumentsPolicy() != model.SecretsOff || p.ResultsPolicy() != model.SecretsBlock {
		t.Fatalf("set %s/%s, want off/block", p.ArgumentsPolicy(), p.ResultsPolicy())
	}
	c := valid()
	c.SecretScan = p
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
