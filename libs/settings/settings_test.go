package settings

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type opts struct {
	Name    string
	Max     int
	Timeout time.Duration
	On      bool
	Origins []string
}

func register(s *Set, o *opts) {
	s.String(&o.Name, "name", "", "x", "a name")
	s.Int(&o.Max, "max-servers", "", 10, "at most")
	s.Duration(&o.Timeout, "call-timeout", "", 30*time.Second, "timeout")
	s.Bool(&o.On, "no-auth", "", false, "off")
	s.Strings(&o.Origins, "cors-origin", "MCPBUS_CORS_ORIGINS", nil, "origins")
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFlagBeatsEnvAndEnvBeatsDefault(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var o opts
	register(New(fs), &o)
	if err := fs.Parse([]string{"--max-servers", "3"}); err != nil {
		t.Fatal(err)
	}
	err := applyEnv(fs, env(map[string]string{"MCPBUS_MAX_SERVERS": "7", "MCPBUS_CALL_TIMEOUT": "5s",
		"MCPBUS_NO_AUTH": "true", "MCPBUS_CORS_ORIGINS": "http://a, http://b", "MCPBUS_NAME": ""}))
	if err != nil {
		t.Fatal(err)
	}
	if o.Max != 3 || o.Timeout != 5*time.Second || !o.On || o.Name != "x" {
		t.Fatalf("got %+v", o)
	}
	if strings.Join(o.Origins, "|") != "http://a|http://b" {
		t.Fatalf("origins %q", o.Origins)
	}
}

func TestMalformedEnvNamesIt(t *testing.T) {
	for k, v := range map[string]string{"MCPBUS_MAX_SERVERS": "ten", "MCPBUS_CALL_TIMEOUT": "soon", "MCPBUS_NO_AUTH": "maybe"} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var o opts
		register(New(fs), &o)
		_ = fs.Parse(nil)
		err := applyEnv(fs, env(map[string]string{k: v}))
		if err == nil || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), v) {
			t.Errorf("%s=%s: error %v should name the variable and value", k, v, err)
		}
	}
}

func TestSharedFlagSetsEveryTarget(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var a, b opts
	register(New(fs), &a)
	register(New(fs), &b)
	if err := fs.Parse([]string{"--call-timeout", "2s"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs, env(map[string]string{"MCPBUS_MAX_SERVERS": "4"})); err != nil {
		t.Fatal(err)
	}
	if a.Timeout != 2*time.Second || b.Timeout != 2*time.Second || a.Max != 4 || b.Max != 4 {
		t.Fatalf("a %+v b %+v", a, b)
	}
}

func TestConflictingRegistrationPanics(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var x, y time.Duration
	s := New(fs)
	s.Duration(&x, "call-timeout", "", 30*time.Second, "")
	defer func() {
		if recover() == nil {
			t.Fatal("a second default for the same flag must panic")
		}
	}()
	s.Duration(&y, "call-timeout", "", 60*time.Second, "")
}

func TestDescribe(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var o opts
	register(New(fs), &o)
	fs.Bool("plain", false, "no env")
	got := Describe(fs)
	if len(got) != 5 || got[0].Flag != "call-timeout" || got[0].Env != "MCPBUS_CALL_TIMEOUT" || got[0].Default != "30s" {
		t.Fatalf("%+v", got)
	}
}
