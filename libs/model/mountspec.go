package model

import (
	"fmt"
	"strings"
)

// MountSpec is what a docker --mount value asks for, read as the docker CLI
// reads it (a CSV line of key=value fields, keys and the type
// case-insensitive).
type MountSpec struct {
	Type   string // lower case; "volume" when not given
	Source string
	// VolumeDriver: a volume-driver or volume-opt field (the local driver
	// binds any host path with o=bind,device=/).
	VolumeDriver bool
}

// ParseMount reads a --mount value, or says why it is refused. A quote is
// refused outright: the docker CLI reads the value as CSV, where a quoted
// field ("source=/") is a field like any other, so a reader that splits on
// commas would see another key than docker does.
func ParseMount(v string) (MountSpec, string) {
	m := MountSpec{Type: "volume"}
	if strings.Contains(v, `"`) {
		return m, "a --mount value may not hold quotes"
	}
	for _, field := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(field, "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "type":
			m.Type = strings.ToLower(val)
		case "source", "src":
			m.Source = val
		case "volume-driver", "volume-opt":
			m.VolumeDriver = true
		}
	}
	if m.Type == "" {
		return m, fmt.Sprintf("mount type %q is not allowed", v)
	}
	return m, ""
}
