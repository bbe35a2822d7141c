package gateway

import (
	"os"
	"path/filepath"
	"testing"
	"time"
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
