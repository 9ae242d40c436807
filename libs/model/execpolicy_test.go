package model

import (
	"strings"
	"testing"
)

func TestExecPolicy(t *testing.T) {
	bin := func(id string) *McpConfig {
		return &McpConfig{Package: Package{Type: PackageBinary, Identifier: id}, Transport: Transport{Type: TransportStdio}}
	}
	remote := &McpConfig{Package: Package{Type: PackageNPM, Identifier: "x"}, Transport: Transport{Type: TransportHTTP, URL: "https://x"}}
	deploy := ExecPolicy{Types: []string{PackageNPM, PackageDocker, PackageHTTP}}
	if e := deploy.Refuse(bin("/opt/x"), "r1"); e == nil || e.Field != "package.type" ||
		e.Message != "package type binary is not allowed on runner r1 (--exec-types npm,docker,http)" {
		t.Fatalf("%v", e)
	}
	if e := deploy.Refuse(remote, "r1"); e != nil {
		t.Fatalf("an http transport is connected, whatever its package: %v", e)
	}
	if e := (ExecPolicy{}).Refuse(bin("/anywhere"), "r1"); e != nil {
		t.Fatalf("the zero policy allows everything: %v", e)
	}
	p := ExecPolicy{BinaryPrefixes: []string{"/opt/mcp", "/usr/local/libexec/mcp/"}}
	for id, ok := range map[string]bool{
		"/opt/mcp": true, "/opt/mcp/x": true, "/opt/mcp/a/b": true, "/usr/local/libexec/mcp/t": true,
		"/opt/mcpx": false, "/opt/mcp/../bin/sh": false, "/usr/bin/sh": false, "/opt": false,
		"relative/x": true, // only the runner can resolve it
	} {
		e := p.Refuse(bin(id), "r1")
		if (e == nil) != ok {
			t.Errorf("%s: refused %v, want allowed %v", id, e, ok)
		}
		if e != nil && (e.Field != "package.identifier" || !strings.Contains(e.Message, "(--exec-binary-prefixes /opt/mcp,/usr/local/libexec/mcp/)")) {
			t.Errorf("%s: %+v", id, e)
		}
	}
	if !UnderPrefix("/x", "/") {
		t.Fatal(`"/" allows everything`)
	}
}

func TestExecPolicyMetadata(t *testing.T) {
	md := ExecPolicy{Types: []string{PackageNPM}, BinaryPrefixes: []string{"/a", "/b"}}.Metadata()
	if md[MetaExecTypes] != "npm" || md[MetaExecBinaryPrefixes] != "/a,/b" {
		t.Fatalf("%v", md)
	}
	p, ok := ExecPolicyFromMetadata(md)
	if !ok || len(p.Types) != 1 || len(p.BinaryPrefixes) != 2 {
		t.Fatalf("%+v %v", p, ok)
	}
	if _, ok := ExecPolicyFromMetadata(map[string]string{"runner": "old"}); ok {
		t.Fatal("no exec_types: no policy published")
	}
	def := ExecPolicy{}.Metadata()
	if def[MetaExecTypes] != "npm,docker,binary,http" || def[MetaExecBinaryPrefixes] != "" {
		t.Fatalf("%v", def)
	}
}
