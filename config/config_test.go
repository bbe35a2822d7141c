package config

import (
	"bufio"
	"crypto/sha256"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestLoadGoodConfigs(t *testing.T) {
	t.Setenv("MAITRED_BATCH_KEY", "sk-batch")
	t.Setenv("VLLM_KEY", "secret")
	t.Setenv("MAITRED_STORE_PASSWORD", "secret")
	for _, name := range []string{"maitred.yaml", "minimal.yaml", "auth.yaml", "replicas.yaml", "fairness.yaml", "precise.yaml", "large-fleet.yaml"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Load(filepath.Join("..", "configs", name))
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Models) == 0 || len(cfg.Models[0].Backends) == 0 {
				t.Fatalf("no models or backends decoded: %+v", cfg)
			}
		})
	}
}

func TestReferenceConfigValues(t *testing.T) {
	t.Setenv("VLLM_KEY", "secret")
	cfg, err := Load("../configs/maitred.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The reference file spells out every default: it must equal them.
	def := Default()
	got := cfg
	got.Models = nil
	if !reflect.DeepEqual(got, def) {
		t.Errorf("configs/maitred.yaml disagrees with Default():\n got %+v\nwant %+v", got, def)
	}
	m := cfg.Models[0]
	if m.Name != "qwen3" || m.MaxModelLen != 4096 || m.Tokenizer != "/models/qwen3" {
		t.Errorf("model = %+v", m)
	}
	if b := m.Backends[0]; b.URL != "http://127.0.0.1:8000" || b.APIKeyEnv != "VLLM_KEY" {
		t.Errorf("backend = %+v", b)
	}
}

// TestPreciseRoutingConfig: configs/precise.yaml's keys decode, and the
// event endpoints of each rank are where vLLM publishes them.
func TestPreciseRoutingConfig(t *testing.T) {
	cfg, err := Load("../configs/precise.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Models[0]
	if m.Routing != RoutingPrecise || m.PreciseOrDefault() != (PreciseRoutingConfig{BlockSize: 16, MaxBlocks: 1 << 20, CacheWeight: 1, LoadWeight: 2}) {
		t.Fatalf("routing = %q, %+v", m.Routing, m.Precise)
	}
	url := m.Backends[0].KVEvents
	if ev, rp := url.Endpoints("10.0.0.5:8000", 0); ev != "tcp://10.0.0.5:5557" || rp != "tcp://10.0.0.5:5558" || url.Topic != "kv-events" {
		t.Fatalf("url backend: %s %s", ev, rp)
	}
	dns := m.Backends[1].KVEvents
	if dns.Ranks() != 2 {
		t.Fatalf("ranks = %d", dns.Ranks())
	}
	if ev, rp := dns.Endpoints("10.1.2.3", 1); ev != "tcp://10.1.2.3:5558" || rp != "tcp://10.1.2.3:5559" {
		t.Fatalf("dns backend rank 1: %s %s", ev, rp)
	}
	if ev, _ := dns.Endpoints("fd00::1", 0); ev != "tcp://[fd00::1]:5557" {
		t.Fatalf("IPv6: %s", ev)
	}
	// Absent keys: routing as today, no events.
	min, err := Load("../configs/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if min.Models[0].Routing != RoutingDefault || min.Models[0].Backends[0].KVEvents.Set() {
		t.Fatalf("minimal: %+v", min.Models[0])
	}
}

// TestFleetBudgets: configs/large-fleet.yaml's budgets decode as numbers
// a second and stretch 512 backends' intervals as its comments say;
// absent, they are auto, which leaves 64 backends' scrapes and 256
// backends' probes at their intervals.
func TestFleetBudgets(t *testing.T) {
	cfg, err := Load("../configs/large-fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ScrapeBudget != 128 || cfg.Health.Budget != 200 || cfg.Fleet().ScrapeBudget != 128 {
		t.Fatalf("scrape_budget %v, health.budget %v", cfg.ScrapeBudget, cfg.Health.Budget)
	}
	scrapes := cfg.ScrapeBudget.PerSecond(64, cfg.ScrapeInterval.D())
	if got := Stretch(cfg.ScrapeInterval.D(), 512, scrapes); got != 4*time.Second {
		t.Errorf("512 backends scraped every %v, want 4s", got)
	}
	if got := Stretch(cfg.ScrapeInterval.D(), 32, scrapes); got != 250*time.Millisecond {
		t.Errorf("32 backends scraped every %v, want 250ms", got)
	}
	if got := Stretch(cfg.Health.Interval.D(), 512, cfg.Health.Budget.PerSecond(256, time.Second)); got != 2560*time.Millisecond {
		t.Errorf("512 backends probed every %v, want 2.56s", got)
	}
	min, err := Load("../configs/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !min.ScrapeBudget.Auto() || !min.Health.Budget.Auto() {
		t.Fatalf("absent budgets are not auto: %v, %v", min.ScrapeBudget, min.Health.Budget)
	}
	auto := min.ScrapeBudget.PerSecond(64, min.ScrapeInterval.D())
	for n, want := range map[int]time.Duration{1: 250 * time.Millisecond, 64: 250 * time.Millisecond, 65: 253906250, 512: 2 * time.Second} {
		if got := Stretch(min.ScrapeInterval.D(), n, auto); got != want {
			t.Errorf("auto: %d backends scraped every %v, want %v", n, got, want)
		}
	}
	if out, err := yaml.Marshal(min.Health); err != nil || !strings.Contains(string(out), "budget: auto") {
		t.Errorf("health marshals as %s (%v)", out, err)
	}
}

func TestMinimalConfigTakesDefaults(t *testing.T) {
	cfg, err := Load("../configs/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:8080" || cfg.MaxBodyBytes != 8<<20 || cfg.Health.Interval.D() != time.Second {
		t.Errorf("defaults not applied: %+v", cfg)
	}
}

// TestBadConfigs loads every file in configs/bad; each names the error it
// must produce in its first line, "# error: ...".
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("../configs/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad configs found: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want := expectedError(t, f)
			_, err := Load(f)
			if err == nil {
				t.Fatalf("loaded without error; want %q", want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error = %q\nwant it to contain %q", err, want)
			}
		})
	}
}

func expectedError(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	want, ok := strings.CutPrefix(sc.Text(), "# error: ")
	if !ok {
		t.Fatalf("%s: first line must be \"# error: <expected message>\"", path)
	}
	return want
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"two documents", "models: []\n---\nmodels: []\n", "more than one YAML document"},
		{"not yaml", "models: [\n", "not valid YAML"},
		{"null value", "listen:\nmodels: []\n", "listen (line 1): value is empty"},
		{"top level list", "- a\n", "(top level) (line 1): want a mapping of keys"},
		{"negative body", "max_body_bytes: -1\nmodels: [{name: a, backends: [{url: 'http://h:1'}]}]\n", "max_body_bytes: must be positive"},
		{"duplicate key", "listen: a:1\nlisten: b:2\n", "listen (line 2): key given twice"},
		{"zero duration", "idle_timeout: 0s\nmodels: [{name: a, backends: [{url: 'http://h:1'}]}]\n", "idle_timeout: must be positive"},
		{"dup backend", "models: [{name: a, backends: [{url: 'http://h:1'}, {url: 'http://h:1'}]}]\n", "models[0].backends[1].url: \"http://h:1\" is already models[0].backends[0].url"},
		{"dup dns", "models: [{name: a, backends: [{dns: 'v:1'}, {dns: 'v:1'}]}]\n", "models[0].backends[1].dns: \"v:1\" is already models[0].backends[0].dns"},
		{"bad srv", "models: [{name: a, backends: [{srv: 'vllm.default'}]}]\n", "models[0].backends[0].srv: want an SRV name"},
		{"dns port", "models: [{name: a, backends: [{dns: 'v:http'}]}]\n", "models[0].backends[0].dns: want a port number"},
		{"dns_interval on a url", "models: [{name: a, backends: [{url: 'http://h:1', dns_interval: 1s}]}]\n", "models[0].backends[0].dns_interval: want a positive duration, with dns or srv only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	// One dns entry may stand for any number of backends: min_ready is
	// not bounded by the number of entries.
	if _, err := Parse([]byte("models: [{name: a, min_ready: 3, backends: [{dns: 'v:1'}, {srv: '_http._tcp.v.test'}]}]\n")); err != nil {
		t.Errorf("min_ready over dns and srv entries: %v", err)
	}
}

// TestCountCacheBytes: the count cache is on by default (64 MiB), 0 turns
// it off, a budget too small for it is refused naming the key.
func TestCountCacheBytes(t *testing.T) {
	const models = "models: [{name: a, backends: [{url: 'http://h:1'}]}]\n"
	for _, tt := range []struct {
		yaml string
		want int64
		err  string
	}{
		{models, 64 << 20, ""},
		{"count_cache_bytes: 0\n" + models, 0, ""},
		{"count_cache_bytes: 1048576\n" + models, 1 << 20, ""},
		{"count_cache_bytes: -1\n" + models, 0, "count_cache_bytes: must be 0 (off) or at least 65536, got -1"},
		{"count_cache_bytes: 100\n" + models, 0, "count_cache_bytes: must be 0 (off) or at least 65536, got 100"},
		{"count_cache_bytes: lots\n" + models, 0, "count_cache_bytes (line 1)"},
	} {
		cfg, err := Parse([]byte(tt.yaml))
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: error %v, want %q", tt.yaml, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("%q: %v", tt.yaml, err)
		case tt.err == "" && cfg.CountCacheBytes != tt.want:
			t.Errorf("%q: count_cache_bytes %d, want %d", tt.yaml, cfg.CountCacheBytes, tt.want)
		}
	}
}

func TestParseReportsEveryValidationError(t *testing.T) {
	_, err := Parse([]byte("listen: nope\nmodels: [{name: a}]\n"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"listen: want host:port", "models[0].backends: at least one backend"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../configs/*.yaml")
	bad, _ := filepath.Glob("../configs/bad/*.yaml")
	for _, p := range append(files, bad...) {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err == nil {
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Parse accepted a config Validate rejects: %v", err)
			}
		}
	})
}

func TestAuthConfig(t *testing.T) {
	t.Setenv("MAITRED_BATCH_KEY", "sk-batch")
	cfg, err := Load("../configs/auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AdminListen != "127.0.0.1:9090" {
		t.Errorf("admin_listen = %q, want the admin pages on their own port with auth", cfg.AdminListen)
	}
	a := cfg.Auth
	if a == nil || len(a.Keys) != 2 || a.KeysFile != filepath.Join("..", "configs", "keys.yaml") {
		t.Fatalf("auth = %+v", a)
	}
	// Load keeps the keys_file as it read and validated it, with the
	// digest of its bytes, so that the gateway does not parse it again.
	data, err := os.ReadFile(a.KeysFile)
	if err != nil {
		t.Fatal(err)
	}
	if lk := a.LoadedKeysFile(); lk == nil || lk.Set.Len() != len(a.Keys)+1 || lk.Set.Name(len(a.Keys)) != "team-b" || lk.Sum != sha256.Sum256(data) {
		t.Errorf("the keys_file as loaded: %+v", lk)
	}
	k := a.Keys[0]
	if k.Name != "team-a" || k.Priority != "interactive" || k.Limits.TokensPerMinute != 200000 || k.Limits.MaxConcurrent != 32 || k.Models[0] != AllModels {
		t.Errorf("keys[0] = %+v", k)
	}
	if d, err := k.Digest(); err != nil || d != sha256Sum("sk-team-a") {
		t.Errorf("keys[0] digest = %x, %v", d, err)
	}
	if d, err := a.Keys[1].Digest(); err != nil || d != sha256Sum("sk-batch") {
		t.Errorf("keys[1] (env) digest = %x, %v", d, err)
	}
	file, err := LoadKeys(a.KeysFile, &cfg)
	if err != nil || len(file) != 1 || file[0].Name != "team-b" || file[0].Limits.RequestsPerMinute != 120 {
		t.Fatalf("keys file = %+v, %v", file, err)
	}
	// No auth section: open, Auth nil.
	if cfg, err := Load("../configs/minimal.yaml"); err != nil || cfg.Auth != nil {
		t.Errorf("minimal config: auth = %+v, %v", cfg.Auth, err)
	}
}

// TestParseKeysRefuses: a keys_file is checked as strictly as the config,
// with key paths into the file, and against the config's own keys.
func TestParseKeysRefuses(t *testing.T) {
	t.Setenv("MAITRED_BATCH_KEY", "sk-batch")
	cfg, err := Load("../configs/auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	key := "sha256: 292d075b18c9240a48b848c521422c5f418f7dd16b5c66755fe58d0fb6a43e1f"
	tests := []struct{ name, yaml, want string }{
		{"empty", "", "keys file is empty"},
		{"unknown key", "keys:\n  - name: x\n    " + key + "\n    modles: ['*']\n", "keys[0].modles (line 4): unknown key"},
		{"dup name with config", "keys:\n  - name: batch-jobs\n    " + key + "\n    models: ['*']\n", `keys[0].name: "batch-jobs" is already auth.keys[1].name`},
		{"same key as config", "keys:\n  - name: c\n    sha256: 8879f6a4ae35c420a15d35fed3b8dd07577207803d404f6d4cc4fa829dafa910\n    models: ['*']\n", "keys[0]: the same key as auth.keys[0]"},
		{"unset env", "keys:\n  - name: c\n    env: MAITRED_TEST_UNSET_KEY\n    models: ['*']\n", "keys[0].env: environment variable MAITRED_TEST_UNSET_KEY is not set"},
		{"negative limit", "keys:\n  - name: c\n    " + key + "\n    models: ['*']\n    limits: {max_concurrent: -1}\n", "keys[0].limits: must not be negative"},
		{"zero weight", "keys:\n  - name: c\n    " + key + "\n    models: ['*']\n    weight: 0\n", "keys[0].weight: want a positive number, got 0"},
		{"weight not a number", "keys:\n  - name: c\n    " + key + "\n    models: ['*']\n    weight: heavy\n", "keys[0].weight (line 5): want a number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseKeys([]byte(tt.yaml), &cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseKeys error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	if keys, err := ParseKeys([]byte("keys: []\n"), &cfg); err != nil || len(keys) != 0 {
		t.Errorf("an empty list (every file key removed) = %v, %v; want accepted", keys, err)
	}
}

// TestFairnessConfig: fairness and its weights take their defaults (fifo;
// input 1, output 2; a key's weight 1), configs/fairness.yaml reads as
// written, and a weight that is not a positive number is refused by its
// key path.
func TestFairnessConfig(t *testing.T) {
	t.Setenv("MAITRED_BATCH_KEY", "sk-batch")
	min, err := Load("../configs/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := min.Models[0]
	if in, out := m.FairnessWeightsOrDefault(); m.FairnessOrDefault() != FairnessFIFO || in != 1 || out != 2 {
		t.Errorf("defaults: fairness %q, weights %v %v; want fifo, 1, 2", m.FairnessOrDefault(), in, out)
	}
	cfg, err := Load("../configs/fairness.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m = cfg.Models[0]
	if in, out := m.FairnessWeightsOrDefault(); m.FairnessOrDefault() != FairnessTokens || in != 1 || out != 2 {
		t.Errorf("fairness.yaml: fairness %q, weights %v %v", m.FairnessOrDefault(), in, out)
	}
	var weights []float64
	for _, k := range cfg.Auth.Keys {
		weights = append(weights, k.WeightOrDefault())
	}
	if !reflect.DeepEqual(weights, []float64{1, 1, 3}) {
		t.Errorf("key weights %v, want [1 1 3]", weights)
	}
	auth, err := Load("../configs/auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if file, err := LoadKeys(auth.Auth.KeysFile, &auth); err != nil || file[0].WeightOrDefault() != 2 {
		t.Errorf("keys.yaml weight: %+v, %v; want 2", file, err)
	}
	const model = "models: [{name: a, fairness: tokens, backends: [{url: 'http://h:1'}], fairness_weights: "
	for _, tt := range []struct{ yaml, want string }{
		{model + "{input: -1}}]\n", "models[0].fairness_weights.input: want a positive number, got -1"},
		{model + "{output: .inf}}]\n", "models[0].fairness_weights.output: want a positive number, got +Inf"},
		{model + "{output: 2, extra: 1}}]\n", "models[0].fairness_weights.extra (line 1): unknown key"},
		{model + "{input: 0.5}}]\n", ""},
	} {
		_, err := Parse([]byte(tt.yaml))
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%q: error %v, want %q", tt.yaml, err, tt.want)
		}
	}
}

func TestStoreURL(t *testing.T) {
	tests := []struct {
		url  string
		want StoreAddr
	}{
		{"redis://valkey:6379/0", StoreAddr{Addr: "valkey:6379"}},
		{"redis://valkey", StoreAddr{Addr: "valkey:6379"}},
		{"rediss://cache.example:6380/2", StoreAddr{Addr: "cache.example:6380", DB: 2, TLS: true}},
		{"redis://maitred@10.0.0.9:6379/1", StoreAddr{Addr: "10.0.0.9:6379", DB: 1, User: "maitred"}},
	}
	for _, tt := range tests {
		cfg, err := Parse([]byte("store: " + tt.url + "\nmodels: [{name: a, backends: [{url: 'http://h:1'}]}]\n"))
		if err != nil {
			t.Fatalf("%s: %v", tt.url, err)
		}
		got, err := cfg.Store.Addr()
		if err != nil || got != tt.want {
			t.Errorf("%s: Addr() = %+v, %v; want %+v", tt.url, got, err, tt.want)
		}
		if !cfg.Store.Shared() || cfg.Store.OnError != StoreErrorLocal {
			t.Errorf("%s: store = %+v", tt.url, cfg.Store)
		}
	}
}

func TestTracingSection(t *testing.T) {
	cfg, err := Parse([]byte("tracing:\n  endpoint: http://otel:4317\n  protocol: grpc\n  sampling_ratio: 0\n  service_name: edge\nmodels: [{name: a, backends: [{url: 'http://h:1'}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	tc := cfg.Tracing
	if tc.Endpoint != "http://otel:4317" || tc.Protocol != TracingGRPC || tc.SamplingRatio == nil || *tc.SamplingRatio != 0 || tc.ServiceName != "edge" {
		t.Errorf("tracing = %+v", tc)
	}
	if d := Default().Tracing; d.Endpoint != "" || d.SamplingRatio != nil {
		t.Errorf("tracing is on by default: %+v", d)
	}
}

// TestH2CKey: h2c is off by default (configs/maitred.yaml shows it so) and
// on where the replicas' example, behind a front proxy, sets it.
func TestH2CKey(t *testing.T) {
	t.Setenv("MAITRED_STORE_PASSWORD", "secret")
	if Default().H2C {
		t.Error("h2c is on by default")
	}
	cfg, err := Load("../configs/replicas.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.H2C {
		t.Error("configs/replicas.yaml: h2c not decoded as true")
	}
}
