package gateway

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/config"
)

// TestFilePollSkipsUnchangedReads: a poll reads and hashes the watched
// file only when its stat moved (or every fullReadEvery polls), and an
// edit in place that keeps the size and the modification time is still
// seen within fullReadEvery polls.
func TestFilePollSkipsUnchangedReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("keys: []\n")
	reads := 0
	s := fileState{readFile: func(p string) ([]byte, error) { reads++; return os.ReadFile(p) }}
	if data, changed, _, err := s.poll(path); err != nil || !changed || string(data) != "keys: []\n" {
		t.Fatalf("first poll: %q %v %v", data, changed, err)
	}
	for i := 0; i < 5; i++ {
		if _, changed, _, err := s.poll(path); err != nil || changed {
			t.Fatalf("unchanged poll %d: changed=%v err=%v", i, changed, err)
		}
	}
	if reads != 1 {
		t.Fatalf("reads = %d after 6 polls of an unchanged file, want 1", reads)
	}

	write("keys: [ ]\n") // another size: the next poll reads it
	if data, changed, _, err := s.poll(path); err != nil || !changed || string(data) != "keys: [ ]\n" {
		t.Fatalf("poll after an edit: %q %v %v", data, changed, err)
	}

	// The same size and modification time: only the periodic read sees it.
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	write("keys: [] \n")
	if err := os.Chtimes(path, time.Time{}, fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	seen := -1
	for i := 0; i < fullReadEvery; i++ {
		if _, changed, _, err := s.poll(path); err != nil {
			t.Fatal(err)
		} else if changed {
			seen = i
			break
		}
	}
	if seen < 0 {
		t.Fatalf("an edit keeping size and mtime unseen after %d polls", fullReadEvery)
	}
}

// TestKeysFileReadWhileWrittenIsHeld: a keys_file read in the middle of
// its writing (JSON cut short) is not parsed (yaml.v3 would spend seconds
// on a large one, beside requests, to refuse it): the watcher reads it
// again at its next poll and takes what it finds then; a file that stays
// cut short is refused at that second reading; a whole file is taken at
// its first.
func TestKeysFileReadWhileWrittenIsHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	whole := func(name, key string) string {
		return `{"keys": [{"name": "` + name + `", "sha256": "` + digestOf(key) + `", "models": ["*"]}]}` + "\n"
	}
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(whole("a", "sk-a"))
	core, logs := observer.New(zap.InfoLevel)
	tg := startGatewayFull(t, nil, extras{log: zap.New(core)}, func(c *config.Config) {
		c.Auth = &config.AuthConfig{KeysFile: path}
	}, "http://127.0.0.1:1") // no request is sent
	refused := func() int { return logs.FilterMessage("keys_file refused; the keys in force keep serving").Len() }
	loaded := func() int { return logs.FilterMessage("keys_file loaded").Len() }
	has := func(key string) bool { return tg.keys.Load().lookup(key) != nil }

	cut := whole("b", "sk-b")
	cut = cut[:len(cut)/2]
	write(cut)
	tg.reloadKeys()
	if refused() != 0 || loaded() != 0 || !has("sk-a") {
		t.Fatalf("a keys_file cut short was taken at its first reading: %d refused, %d loaded", refused(), loaded())
	}
	write(whole("b", "sk-b")) // the writer finished
	tg.reloadKeys()
	if refused() != 0 || loaded() != 1 || !has("sk-b") || has("sk-a") {
		t.Fatalf("the finished file: %d refused, %d loaded, sk-b in force %v", refused(), loaded(), has("sk-b"))
	}

	write(cut) // cut short and left so: refused at its second reading
	tg.reloadKeys()
	if refused() != 0 {
		t.Fatal("refused at its first reading")
	}
	tg.reloadKeys()
	if refused() != 1 || !has("sk-b") {
		t.Fatalf("a file that stays cut short: %d refused (want 1), sk-b in force %v", refused(), has("sk-b"))
	}

	write(whole("c", "sk-c")) // a whole file: taken at its first reading
	tg.reloadKeys()
	if loaded() != 2 || !has("sk-c") {
		t.Fatalf("a whole file not taken at its first reading: %d loaded", loaded())
	}
}
