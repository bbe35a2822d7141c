package gateway

import (
	"testing"

	"github.com/maitred-dev/maitred/config"
)

// TestKeyProfilesTellListsApart: keys share a profile (their allow-list
// among it) only when their models, priority, limits and weight are the
// same; no two different model lists read as one, whatever bytes the
// names hold.
func TestKeyProfilesTellListsApart(t *testing.T) {
	differ := [][2][]string{
		{{"a\x00b"}, {"a", "b"}},
		{{"1:a1:b"}, {"a", "b"}},
		{{"a\x00b", "c"}, {"a", "b\x00c"}},
		{{"ab", "c"}, {"a", "bc"}},
		{{"a", "b"}, {"b", "a"}},
		{{"*"}, {"*", "a"}},
	}
	for _, d := range differ {
		x, y := profileKeyOf(&config.KeyConfig{Models: d[0]}), profileKeyOf(&config.KeyConfig{Models: d[1]})
		if x == y {
			t.Errorf("models %q and %q share a profile", d[0], d[1])
		}
	}
	w := 2.0
	same := config.KeyConfig{Models: []string{"a", "b"}, Priority: "batch", Limits: config.KeyLimits{MaxConcurrent: 3}, Weight: &w}
	other := same
	other.Models = []string{"a", "b"}
	if profileKeyOf(&same) != profileKeyOf(&other) {
		t.Error("two keys with the same models, priority, limits and weight have different profiles")
	}
	for _, change := range []func(k *config.KeyConfig){
		func(k *config.KeyConfig) { k.Priority = "" },
		func(k *config.KeyConfig) { k.Limits.TokensPerDay = 1 },
		func(k *config.KeyConfig) { k.Weight = nil },
	} {
		k := same
		change(&k)
		if profileKeyOf(&k) == profileKeyOf(&same) {
			t.Errorf("%+v shares the profile of %+v", k, same)
		}
	}
}
