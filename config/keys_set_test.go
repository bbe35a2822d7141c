package config

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// keySetCorpus is keys_files read after configs/auth.yaml's own keys
// (team-a, by digest; batch-jobs, by env): the JSON corpus, and files
// whose problems only validation finds, in the file and against the
// config's keys.
func keySetCorpus() []string {
	var files []string
	for _, tt := range keysJSONCorpus() {
		files = append(files, tt.data)
	}
	d := func(s string) string { k := sha256Sum(s); return fmt.Sprintf("%x", k[:]) }
	team := "8879f6a4ae35c420a15d35fed3b8dd07577207803d404f6d4cc4fa829dafa910" // auth.yaml's team-a
	return append(files,
		`{"keys": [{"name": "a", "sha256": "`+d("1")+`", "models": ["*"]}, {"name": "a", "sha256": "`+d("2")+`", "models": ["*"]}]}`,
		`{"keys": [{"name": "batch-jobs", "sha256": "`+d("1")+`", "models": ["*"]}]}`,
		`{"keys": [{"name": "c", "sha256": "`+team+`", "models": ["*"]}, {"name": "d", "sha256": "`+strings.ToUpper(team)+`", "models": ["x"]}]}`,
		`{"keys": [{"name": "c", "sha256": "abc", "env": "MAITRED_BATCH_KEY", "models": []}, {"name": "", "models": [""], "priority": "gold", "weight": -1}]}`,
		`{"keys": [{"name": "c", "env": "MAITRED_TEST_UNSET_KEY", "sha256": "xyz", "models": ["q"], "limits": {"max_concurrent": -1}}]}`,
		`{"keys": [{"name": "c", "sha256": "`+d("c")+`", "models": ["qwen3", "embed"], "priority": "interactive", "weight": 3},`+
			` {"name": "e", "sha256": "`+d("e")+`", "models": ["qwen3", "embed"], "priority": "interactive", "weight": 3},`+
			` {"name": "f", "sha256": "`+d("f")+`", "models": ["qwen3","embed"], "priority": "interactive", "weight": 3},`+
			` {"name": "g", "env": "MAITRED_BATCH_KEY", "models": ["qwen3"]}]}`,
		`{"keys": [{"name": "h", "sha256": "`+strings.Repeat("g", 64)+`", "models": ["*"]}, {"name": "i", "sha256": "`+strings.Repeat("Ab", 32)+`", "models": ["*"]}]}`,
		"keys:\n  - name: y\n    sha256: "+d("y")+"\n    models: [qwen3, embed]\n    weight: 2\n",
	)
}

// TestReadKeySetMatchesParseKeys: a keys_file read straight into a set
// (ReadKeySet: the JSON decoder feeding the validation key by key) holds
// what ParseKeys reads, checked with the config's keys in front, or
// refuses it with the very errors ParseKeys gives; and so does a set made
// from lists (NewKeySet).
func TestReadKeySetMatchesParseKeys(t *testing.T) {
	t.Setenv("MAITRED_BATCH_KEY", "sk-batch")
	cfg, err := Load("../configs/auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, data := range keySetCorpus() {
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkKeySet(t, []byte(data), &cfg) })
	}
}

// FuzzReadKeySet holds ReadKeySet to ParseKeys on any input.
func FuzzReadKeySet(f *testing.F) {
	for _, data := range keySetCorpus() {
		f.Add([]byte(data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Config{PriorityClasses: []string{"interactive", "batch"}, Auth: &AuthConfig{Keys: []KeyConfig{{Name: "team-a", SHA256: strings.Repeat("ab", 32), Models: []string{"*"}}}}}
		checkKeySet(t, data, &cfg)
	})
}

// checkKeySet compares ReadKeySet on data with ParseKeys and NewKeySet.
func checkKeySet(t *testing.T, data []byte, cfg *Config) {
	t.Helper()
	got, err := ReadKeySet(data, cfg, 0)
	fileKeys, wantErr := ParseKeys(data, cfg)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("ReadKeySet refuses with\n%v\nParseKeys with\n%v\non %q", err, wantErr, data)
	}
	if wantErr != nil {
		return
	}
	fromLists, err := NewKeySet(cfg.Auth.Keys, fileKeys, cfg)
	if err != nil {
		t.Fatalf("NewKeySet refuses what ParseKeys accepts: %v", err)
	}
	all := append(append([]KeyConfig{}, cfg.Auth.Keys...), fileKeys...)
	for name, s := range map[string]*KeySet{"ReadKeySet": got, "NewKeySet": fromLists} {
		if s.Len() != len(all) || len(s.Digests) != len(all) {
			t.Fatalf("%s: %d keys, %d digests; want %d", name, s.Len(), len(s.Digests), len(all))
		}
		for i := range all {
			k, p := &all[i], &s.Profiles[s.Profile(i)]
			d, err := k.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if s.Name(i) != k.Name || s.Digests[d] != int32(i) || fmt.Sprint(p.Models) != fmt.Sprint(k.Models) || len(p.Models) != len(k.Models) ||
				p.Priority != k.Priority || p.Limits != k.Limits || (p.Weight == nil) != (k.Weight == nil) || p.WeightOrDefault() != k.WeightOrDefault() {
				t.Fatalf("%s: key %d is %q, digest index %d, profile %+v (weight %v); want %+v", name, i, s.Name(i), s.Digests[d], p, p.WeightOrDefault(), k)
			}
		}
	}
}

// generatedKeySetJSON is generatedKeysJSON with some keys sharing
// profiles of two models, a priority and a weight.
func generatedKeySetJSON(n int) []byte {
	return []byte(strings.ReplaceAll(string(generatedKeysJSON(n)), `"models": ["*"], "limits": {"requests_per_minute": 100,`,
		`"models": ["qwen3", "embed"], "priority": "batch", "weight": 2, "limits": {"requests_per_minute": 100,`))
}

// TestKeySetAllocation: a keys_file read straight into a set allocates
// nothing per key but what the set keeps (its names, its digest index, the
// offsets) and a name index: no KeyConfig per key, no text per key, no map
// of names (a 100k-key reload's garbage is what runs collections beside
// requests). Measured on 1k and 10k keys, sized by their count as the
// gateway sizes a reload by the table in force.
func TestKeySetAllocation(t *testing.T) {
	cfg := Config{PriorityClasses: []string{"interactive", "batch"}}
	measure := func(n int) (allocs, bytes float64) {
		data := generatedKeySetJSON(n)
		if s, err := ReadKeySet(data, &cfg, n); err != nil || s.Len() != n || len(s.Profiles) != 1 {
			t.Fatalf("ReadKeySet: %v keys, err %v", s, err)
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		const runs = 3
		for range runs {
			if _, err := ReadKeySet(data, &cfg, n); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&m1)
		return float64(m1.Mallocs-m0.Mallocs) / runs, float64(m1.TotalAlloc-m0.TotalAlloc) / runs
	}
	smallAllocs, smallBytes := measure(1000)
	largeAllocs, largeBytes := measure(10000)
	perKeyAllocs, perKeyBytes := (largeAllocs-smallAllocs)/9000, (largeBytes-smallBytes)/9000
	// The digest index is about 64 bytes a key (a [32]byte and an int32 a
	// slot, slots 7/8 full at most, and their control bytes) and as much
	// again for the tables it outgrew (it is not made at full size at
	// once: keyIndexHint), the name index 16 (two 8-byte slots a key), the
	// offsets and profile indexes 8, the names their length (2-5 bytes
	// here) and the name string's growth: ~185. Through a KeyConfig list,
	// 514.
	if perKeyAllocs > 0.05 || perKeyBytes > 256 {
		t.Errorf("%.3f allocations and %.0f bytes per key (%.0f and %.0f at 1k keys, %.0f and %.0f at 10k); want none per key and at most 256 bytes",
			perKeyAllocs, perKeyBytes, smallAllocs, smallBytes, largeAllocs, largeBytes)
	}
}

// TestKeyReadingParks: reading a large keys_file into a set parks every
// 1,024 keys (KeyYielder: a runtime.Gosched leaves the requests queued on
// the P the collector's mark worker holds waiting behind it), and only
// then (a park costs ~0.1 ms of wall time). In a synctest bubble a park
// is a microsecond of the bubble's clock, a Gosched none.
func TestKeyReadingParks(t *testing.T) {
	cfg := Config{PriorityClasses: []string{"interactive", "batch"}}
	data := generatedKeysJSON(4096)
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if s, err := ReadKeySet(data, &cfg, 0); err != nil || s.Len() != 4096 {
			t.Fatalf("ReadKeySet: %v", err)
		}
		if parks := time.Since(start) / time.Microsecond; parks != 4 {
			t.Errorf("%d parks reading 4,096 keys, want 4 (one every 1,024 keys)", parks)
		}
	})
}
