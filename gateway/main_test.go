package gateway

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/maitred-dev/maitred/tokenize"
)

// fixtureLoader loads the package's fixture tokenizers: tests that load
// one folder (with any chat template) share its parsed tokenizer, as the
// gateway's command shares them between models.
var fixtureLoader *tokenize.Loader

func TestMain(m *testing.M) {
	fixtureLoader = tokenize.NewLoader()
	goleak.VerifyTestMain(m)
}
