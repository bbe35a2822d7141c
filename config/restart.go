package config

import (
	"fmt"
	"reflect"
	"strings"
)

// Settings a running gateway cannot change.
//
// A reload (SIGHUP, or the file changing) puts most of a config in force
// at once; the settings that were used once at start (the listeners and
// their server, what was sized or started once, the shape of the queues)
// keep the values the gateway started with. They are declared where they
// are defined, by a tag on the field:
//
//	reload:"restart"   the field's value needs a restart; a section (a
//	                   struct) needs one as a whole, and an inline section
//	                   (StoreConfig) names each of its keys
//	reload:"presence"  whether the section is present needs a restart;
//	                   what it holds reloads (auth)
//
// Fields without the tag reload, and a section without it is searched for
// tagged fields (triage.baseline). KeepRestartOnly reads the tags.

// Values of the reload tag.
const (
	reloadRestart  = "restart"
	reloadPresence = "presence"
)

// KeepRestartOnly compares next, a config about to be put in force, with
// running, the one in force, on every setting that needs a restart. Each
// that differs is named by its key path (in the file's field order) and
// set back in next to running's value, so that next can be put in force
// as a whole.
func KeepRestartOnly(next, running *Config) (changed []string) {
	keepRestartOnly(reflect.ValueOf(next).Elem(), reflect.ValueOf(running).Elem(), "", false, &changed)
	return changed
}

// RestartOnlyKeys returns the key paths of the settings that need a
// restart, in the file's field order.
func RestartOnlyKeys() []string {
	var keys []string
	restartOnlyKeys(reflect.TypeFor[Config](), "", false, &keys)
	return keys
}

// keepRestartOnly walks next and running (two values of one struct type)
// field by field; all says that every field is restart-only (an inline
// section tagged as a whole).
func keepRestartOnly(next, running reflect.Value, prefix string, all bool, changed *[]string) {
	t := next.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		path, inline := fieldPath(f, prefix)
		mode := reloadMode(f, all)
		nv, rv := next.Field(i), running.Field(i)
		switch {
		case mode == reloadRestart && inline:
			keepRestartOnly(nv, rv, path, true, changed)
		case mode == reloadRestart:
			if !reflect.DeepEqual(nv.Interface(), rv.Interface()) {
				*changed = append(*changed, path)
				nv.Set(rv)
			}
		case mode == reloadPresence:
			if nv.IsNil() != rv.IsNil() {
				*changed = append(*changed, path)
				nv.Set(rv)
			}
		case f.Type.Kind() == reflect.Struct:
			keepRestartOnly(nv, rv, sectionPrefix(path, inline), false, changed)
		}
	}
}

// restartOnlyKeys is keepRestartOnly's walk over the type alone.
func restartOnlyKeys(t reflect.Type, prefix string, all bool, keys *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		path, inline := fieldPath(f, prefix)
		mode := reloadMode(f, all)
		switch {
		case mode == reloadRestart && inline:
			restartOnlyKeys(f.Type, path, true, keys)
		case mode == reloadRestart || mode == reloadPresence:
			*keys = append(*keys, path)
		case f.Type.Kind() == reflect.Struct:
			restartOnlyKeys(f.Type, sectionPrefix(path, inline), false, keys)
		}
	}
}

// fieldPath is f's key path under prefix; an inline field's keys are its
// parent's, so its path is the prefix itself.
func fieldPath(f reflect.StructField, prefix string) (path string, inline bool) {
	name, opt, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if opt == "inline" {
		return prefix, true
	}
	return prefix + name, false
}

// sectionPrefix is the prefix of the keys of the section at path.
func sectionPrefix(path string, inline bool) string {
	if inline {
		return path
	}
	return path + "."
}

// reloadMode is f's reload tag (restart when all is set and f has none);
// a value other than the ones above is a programming error.
func reloadMode(f reflect.StructField, all bool) string {
	mode := f.Tag.Get("reload")
	switch mode {
	case "":
		if all {
			return reloadRestart
		}
	case reloadRestart:
	case reloadPresence:
		if f.Type.Kind() != reflect.Pointer {
			panic(fmt.Sprintf("config: field %s: reload:%q needs a pointer (a section that may be absent)", f.Name, mode))
		}
	default:
		panic(fmt.Sprintf("config: field %s: unknown reload tag %q", f.Name, mode))
	}
	return mode
}
