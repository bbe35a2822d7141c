package config

import "testing"

// TestTakeLoadedKeysFile: the keys_file as Load read it is taken once
// (the gateway keeps its own table; the config lets go of them), by every
// copy of the section at once.
func TestTakeLoadedKeysFile(t *testing.T) {
	t.Setenv("MAITRED_BATCH_KEY", "sk-batch")
	cfg, err := Load("../configs/auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	copied := *cfg.Auth
	lk := cfg.Auth.TakeLoadedKeysFile()
	if lk == nil || lk.Set.Len() != len(cfg.Auth.Keys)+1 || lk.Set.Name(len(cfg.Auth.Keys)) != "team-b" {
		t.Fatalf("taken: %+v", lk)
	}
	if again := copied.TakeLoadedKeysFile(); again != nil || cfg.Auth.LoadedKeysFile() != nil {
		t.Errorf("the keys are still held after they were taken: %+v", again)
	}
	if (&AuthConfig{}).TakeLoadedKeysFile() != nil {
		t.Error("a section built in code has loaded keys")
	}
}
