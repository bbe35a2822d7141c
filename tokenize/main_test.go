package tokenize

import (
	"testing"

	"go.uber.org/goleak"
)

// fixtureLoader loads the package's fixture models and tokenizers: a
// fixture's tokenizer.json is parsed once for every test that loads it
// (as a model, with any template or clock, or alone).
var fixtureLoader *Loader

func TestMain(m *testing.M) {
	fixtureLoader = NewLoader()
	goleak.VerifyTestMain(m)
}
