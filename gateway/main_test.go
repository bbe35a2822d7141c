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

// The simulators' KV-event publishers (precise_test.go) are zmq4 PUB
// sockets, whose writer goroutine can miss its Close signal (zmq4 v0.17.0
// pubMWriter.run): the simulator's, never the gateway's (a SUB and a
// DEALER), and the only goroutine let through.
func TestMain(m *testing.M) {
	fixtureLoader = tokenize.NewLoader()
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
