package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// restartOnlyWant are the settings a running gateway cannot change, by key
// path: the listeners and server, what is sized or started once, the shape
// of the queues. A change here is a change of what a reload does: it goes
// with docs/configuration.md's list (TestRestartOnlyKeysDocumented).
var restartOnlyWant = []string{
	"listen", "admin_listen", "read_header_timeout", "idle_timeout", "max_header_bytes",
	"max_connections", "h2c", "max_body_bytes_in_flight", "count_cache_bytes", "backend_dial_timeout",
	"health", "scrape_interval", "scrape_budget", "priority_classes", "default_priority", "triage_window",
	"triage.baseline", "store", "store_password_env", "on_store_error", "store_lease",
	"store_heartbeat", "store_timeout", "resolver", "tracing",
}

// presenceOnlyWant are the sections whose presence needs a restart (what
// they hold reloads).
var presenceOnlyWant = []string{"auth"}

// restartSample is a config with a value in every list and optional
// section, so that every key has a field to change.
func restartSample(t *testing.T) Config {
	t.Helper()
	cfg, err := Parse([]byte(`
tracing: {endpoint: "http://otel:4318", sampling_ratio: 0.5}
store: redis://valkey:6379/0
models:
  - name: m
    fairness_weights: {input: 1, output: 2}
    backends: [{url: "http://h:1", kv_events: {endpoint: "tcp://h:5557"}}]
auth:
  keys:
    - name: k
      sha256: 8879f6a4ae35c420a15d35fed3b8dd07577207803d404f6d4cc4fa829dafa910
      models: ["*"]
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// leaf is one value of a config: its key path as the docs write it
// (models[].backends[].url) and how to reach it from the Config.
type leaf struct {
	path  string
	steps []int // field index, or -1 for element 0 of a list / a pointer's target
}

// leaves lists every value of v that is not a section or a list of
// sections, with every reload tag on the way to it (declared: the tagged
// fields' key paths, whatever list or section they sit in).
func leaves(v reflect.Value, path string, steps []int, out *[]leaf, declared map[string]string) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue // not a key: what Load derived (AuthConfig's keys_file as read)
		}
		name, opt, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		p := path + name
		if opt == "inline" {
			p = path
		}
		if mode := f.Tag.Get("reload"); mode != "" && opt == "inline" {
			for sf := range f.Type.Fields() { // an inline section's keys are its parent's
				declared[path+strings.Split(sf.Tag.Get("yaml"), ",")[0]] = mode
			}
		} else if mode != "" {
			declared[p] = mode
		}
		fv := v.Field(i)
		st := append(slices.Clone(steps), i)
		sep := "."
		if opt == "inline" {
			sep = ""
		}
		switch {
		case fv.Kind() == reflect.Struct && isSection(fv.Type()):
			leaves(fv, p+sep, st, out, declared)
		case fv.Kind() == reflect.Pointer && isSection(fv.Type()):
			leaves(fv.Elem(), p+".", append(st, -1), out, declared)
		case fv.Kind() == reflect.Slice && isSection(fv.Type().Elem()):
			leaves(fv.Index(0), p+"[].", append(st, -1), out, declared)
		default:
			*out = append(*out, leaf{p, st})
		}
	}
}

// at follows steps from v.
func at(v reflect.Value, steps []int) reflect.Value {
	for _, s := range steps {
		switch {
		case s >= 0:
			v = v.Field(s)
		case v.Kind() == reflect.Pointer:
			v = v.Elem()
		default:
			v = v.Index(0)
		}
	}
	return v
}

// change gives v another value of its kind.
func change(t *testing.T, v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Float64:
		v.SetFloat(v.Float() + 0.25)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if !v.IsNil() {
			p.Elem().Set(v.Elem())
		}
		change(t, p.Elem(), path)
		v.Set(p)
	default:
		t.Fatalf("%s: the test cannot change a %s; teach change()", path, v.Kind())
	}
}

// restartKeyOf is the restart-only key path that governs the value at
// path (itself, or the section holding it), "" when it reloads.
func restartKeyOf(path string) string {
	for _, k := range restartOnlyWant {
		if path == k || strings.HasPrefix(path, k+".") {
			return k
		}
	}
	return ""
}

// TestKeepRestartOnlyEveryKey changes every value of a config, one at a
// time, and puts it through KeepRestartOnly: a restart-only one is named
// by its key path and set back to the running value; any other is left
// changed and not named. A reload tag the walk does not honour (on a key
// inside a list, say) or a restart-only key added without its tag fails
// here: the declared tags must be exactly the expected list.
func TestKeepRestartOnlyEveryKey(t *testing.T) {
	running := restartSample(t)
	var all []leaf
	declared := map[string]string{}
	leaves(reflect.ValueOf(&running).Elem(), "", nil, &all, declared)
	want := map[string]string{}
	for _, k := range restartOnlyWant {
		want[k] = reloadRestart
	}
	for _, k := range presenceOnlyWant {
		want[k] = reloadPresence
	}
	if !reflect.DeepEqual(declared, want) {
		t.Errorf("reload tags = %v\nwant %v", declared, want)
	}
	if got := RestartOnlyKeys(); !reflect.DeepEqual(sorted(got), sorted(append(slices.Clone(restartOnlyWant), presenceOnlyWant...))) {
		t.Errorf("RestartOnlyKeys() = %v\nwant %v and %v", got, restartOnlyWant, presenceOnlyWant)
	}
	seen := map[string]bool{}
	for _, l := range all {
		next := restartSample(t)
		change(t, at(reflect.ValueOf(&next).Elem(), l.steps), l.path)
		got := KeepRestartOnly(&next, &running)
		key := restartKeyOf(l.path)
		switch {
		case key != "":
			seen[key] = true
			if !slices.Equal(got, []string{key}) {
				t.Errorf("%s changed: KeepRestartOnly named %v, want [%s]", l.path, got, key)
			}
			if !reflect.DeepEqual(next, running) {
				t.Errorf("%s changed: not set back to the running value", l.path)
			}
		default:
			if len(got) != 0 {
				t.Errorf("%s changed: KeepRestartOnly named %v; it reloads", l.path, got)
			}
			if reflect.DeepEqual(next, running) {
				t.Errorf("%s changed: KeepRestartOnly undid the change; it reloads", l.path)
			}
		}
	}
	for _, k := range restartOnlyWant {
		if !seen[k] {
			t.Errorf("restart-only key %s: no value of the config is at it", k)
		}
	}
}

// TestKeepRestartOnlyAuthPresence: whether keys are required at all needs
// a restart, both ways; the running section stays in force.
func TestKeepRestartOnlyAuthPresence(t *testing.T) {
	withAuth := restartSample(t)
	open := restartSample(t)
	open.Auth = nil

	next := open
	if got := KeepRestartOnly(&next, &withAuth); !slices.Equal(got, []string{"auth"}) || next.Auth != withAuth.Auth {
		t.Errorf("auth removed: named %v, auth %+v; want [auth] and the running section kept", got, next.Auth)
	}
	next = restartSample(t)
	if got := KeepRestartOnly(&next, &open); !slices.Equal(got, []string{"auth"}) || next.Auth != nil {
		t.Errorf("auth added: named %v, auth %+v; want [auth] and no section", got, next.Auth)
	}
	// Several at once are named in the file's order.
	next = restartSample(t)
	next.Listen, next.Tracing.ServiceName, next.Store.Lease = "0.0.0.0:1", "edge", next.Store.Lease+1
	if got, want := KeepRestartOnly(&next, &withAuth), []string{"listen", "store_lease", "tracing"}; !slices.Equal(got, want) {
		t.Errorf("named %v, want %v", got, want)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestRestartOnlyKeysDocumented: docs/configuration.md's sentence on the
// settings that need a restart names each of them, and no other key.
func TestRestartOnlyKeysDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	const start, end = "Settings that need a restart are kept as they were", "section exists at all."
	doc := string(b)
	i := strings.Index(doc, start)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("docs/configuration.md has no sentence %q ... %q", start, end)
	}
	var named []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(doc[i:j], -1) {
		named = append(named, m[1])
	}
	if want := RestartOnlyKeys(); !reflect.DeepEqual(sorted(named), sorted(want)) {
		t.Errorf("docs/configuration.md names %v as needing a restart\nwant %v", named, want)
	}
}
