// Package settings binds a service's options to command-line flags and
// environment variables in one place: each setting has one flag name, one
// env var and one default, whether the service runs alone or inside
// `mcpbus up`. A flag given on the command line wins over its env var; a
// malformed value of either is an error that names it.
package settings

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// envAnnotation is the pflag annotation that records a flag's env var.
const envAnnotation = "mcpbus_env"

// EnvPrefix starts every derived env var name.
const EnvPrefix = "MCPBUS_"

// Set registers settings on a pflag.FlagSet.
//
// Registering a flag name that is already there (two services of `mcpbus up`
// share --call-timeout) binds the new target to the same flag, so one value
// reaches both; it panics when the env var or default differ, since the same
// setting must mean the same thing everywhere.
type Set struct {
	fs *pflag.FlagSet
}

// New wraps fs.
func New(fs *pflag.FlagSet) *Set { return &Set{fs: fs} }

// FlagSet is the wrapped flag set.
func (s *Set) FlagSet() *pflag.FlagSet { return s.fs }

// EnvName is the env var of a flag: MCPBUS_ and the flag name upper-cased
// with dashes as underscores (--max-servers: MCPBUS_MAX_SERVERS).
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// String registers a string setting; env "" derives it from the name.
func (s *Set) String(p *string, name, env, def, usage string) {
	s.add(name, env, usage, func(fs *pflag.FlagSet) { fs.StringVar(p, name, def, usage) })
}

// Strings registers a list: the flag may be repeated or given a comma list;
// the env var is a comma list.
func (s *Set) Strings(p *[]string, name, env string, def []string, usage string) {
	s.add(name, env, usage, func(fs *pflag.FlagSet) { fs.StringSliceVar(p, name, def, usage) })
}

// Int registers an int setting.
func (s *Set) Int(p *int, name, env string, def int, usage string) {
	s.add(name, env, usage, func(fs *pflag.FlagSet) { fs.IntVar(p, name, def, usage) })
}

// Int64 registers an int64 setting.
func (s *Set) Int64(p *int64, name, env string, def int64, usage string) {
	s.add(name, env, usage, func(fs *pflag.FlagSet) { fs.Int64Var(p, name, def, usage) })
}

// Float64 registers a float setting.
func (s *Set) Float64(p *float64, name, env string, def float64, usage string) {
	s.add(name, env, usage, func(fs *pflag.FlagSet) { fs.Float64Var(p, name, def, usage) })
}

// Bool registers a boolean setting (env: true/false/1/0).
func (s *Set) Bool(p *bool, name, env string, def bool, usage string) {
	s.add(name, env, usage, func(fs *pflag.FlagSet) { fs.BoolVar(p, name, def, usage) })
}

// Duration registers a duration setting (Go syntax: 30s, 5m).
func (s *Set) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	s.add(name, env, usage, func(fs *pflag.FlagSet) { fs.DurationVar(p, name, def, usage) })
}

// add makes the flag with pflag's own typed value (so parsing is pflag's),
// then adds it to the set or binds it to the flag already there.
func (s *Set) add(name, env, usage string, define func(*pflag.FlagSet)) {
	if env == "" {
		env = EnvName(name)
	}
	scratch := pflag.NewFlagSet(name, pflag.ContinueOnError)
	define(scratch)
	f := scratch.Lookup(name)
	f.Usage = usage + " (env " + env + ")"
	f.Annotations = map[string][]string{envAnnotation: {env}}
	if have := s.fs.Lookup(name); have != nil {
		if got := EnvOf(have); got != env || have.DefValue != f.DefValue || have.Value.Type() != f.Value.Type() {
			panic(fmt.Sprintf("settings: --%s registered twice differently: env %s/%s, default %q/%q, type %s/%s",
				name, got, env, have.DefValue, f.DefValue, have.Value.Type(), f.Value.Type()))
		}
		have.Value = joined{have.Value, f.Value}
		return
	}
	s.fs.AddFlag(f)
}

// joined sets several targets from one flag.
type joined []pflag.Value

func (j joined) String() string { return j[0].String() }
func (j joined) Type() string   { return j[0].Type() }
func (j joined) Set(v string) error {
	for _, t := range j {
		if err := t.Set(v); err != nil {
			return err
		}
	}
	return nil
}

// EnvOf is the env var bound to f ("" for a plain flag).
func EnvOf(f *pflag.Flag) string {
	if v := f.Annotations[envAnnotation]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ApplyEnv sets every flag of fs not given on the command line from its env
// var, when that is set and not empty. Call it after parsing.
func ApplyEnv(fs *pflag.FlagSet) error {
	return applyEnv(fs, os.LookupEnv)
}

func applyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		env := EnvOf(f)
		if err != nil || env == "" || f.Changed {
			return
		}
		v, ok := lookup(env)
		if !ok || v == "" {
			return
		}
		if f.Value.Type() == "stringSlice" {
			v = trimList(v) // "a, b" is a list of a and b
		}
		if e := f.Value.Set(v); e != nil {
			err = fmt.Errorf("%s=%q is not a valid %s (flag --%s): %w", env, v, f.Value.Type(), f.Name, e)
		}
	})
	return err
}

func trimList(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return strings.Join(parts, ",")
}

// Setting describes one registered setting.
type Setting struct {
	Flag    string
	Env     string
	Default string
	Type    string
}

// Describe lists the settings of fs that have an env var, sorted by flag.
func Describe(fs *pflag.FlagSet) []Setting {
	var out []Setting
	fs.VisitAll(func(f *pflag.Flag) {
		if env := EnvOf(f); env != "" {
			out = append(out, Setting{Flag: f.Name, Env: env, Default: f.DefValue, Type: f.Value.Type()})
		}
	})
	slices.SortFunc(out, func(a, b Setting) int { return strings.Compare(a.Flag, b.Flag) })
	return out
}
