package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// decodeStrict walks the YAML tree alongside the Go value so that every
// error names its key path. yaml.v3's KnownFields reports unknown keys by
// line and Go type name only, which tells an operator less than
// "models[0].backends[0].urll: unknown key".
func decodeStrict(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			return &FieldError{path, n.Line, err.Error()}
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n.Tag == "!!null" {
			return &FieldError{path, n.Line, "value is empty"}
		}
		p := reflect.New(v.Type().Elem())
		if err := decodeStrict(n, p.Elem(), path); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return &FieldError{path, n.Line, "want a mapping of keys"}
		}
		fields := map[string][]int{}
		structFields(v.Type(), nil, fields)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			p := joinPath(path, k.Value)
			idx, ok := fields[k.Value]
			if !ok {
				return &FieldError{p, k.Line, "unknown key" + suggest(k.Value, fields)}
			}
			if seen[k.Value] {
				return &FieldError{p, k.Line, "key given twice"}
			}
			seen[k.Value] = true
			if err := decodeStrict(val, v.FieldByIndex(idx), p); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return &FieldError{path, n.Line, "want a list"}
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := decodeStrict(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	default:
		if n.Kind != yaml.ScalarNode {
			return &FieldError{path, n.Line, "want a single value"}
		}
		if n.Tag == "!!null" {
			return &FieldError{path, n.Line, "value is empty"}
		}
		if v.Kind() == reflect.String && n.Tag != "!!str" {
			return &FieldError{path, n.Line, fmt.Sprintf("want a string, got %q (quote it)", n.Value)}
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			return &FieldError{path, n.Line, fmt.Sprintf("want %s, got %q", kindName(v.Kind()), n.Value)}
		}
		return nil
	}
}

// structFields maps each yaml key of t to its field's index path; the keys
// of a field tagged ",inline" (a struct) are t's own.
func structFields(t reflect.Type, at []int, fields map[string][]int) {
	for i := range t.NumField() {
		f := t.Field(i)
		idx := append(append([]int(nil), at...), i)
		tag, opt, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if opt == "inline" && f.Type.Kind() == reflect.Struct {
			structFields(f.Type, idx, fields)
			continue
		}
		if tag != "" && tag != "-" {
			fields[tag] = idx
		}
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.Float64:
		return "a number"
	}
	return k.String()
}

// suggest names a known key that differs from key only in case or by a
// small typo, the usual cause of an unknown key.
func suggest(key string, fields map[string][]int) string {
	for f := range fields {
		if strings.EqualFold(f, key) || strings.ReplaceAll(f, "_", "") == strings.ReplaceAll(strings.ToLower(key), "-", "") {
			return fmt.Sprintf(" (did you mean %q?)", f)
		}
	}
	return ""
}

// Duration is a time.Duration written as "1.5s", "200ms", "5m".
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML reads Go duration syntax.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return errors.New(`want a duration such as "5s" or "250ms"`)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("want a duration such as \"5s\" or \"250ms\", got %q", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes Go duration syntax.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }
