package prefixindex

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests' publisher is zmq4's PUB, whose writer goroutine can miss
// its Close signal and wait for ever (zmq4 v0.17.0 pubMWriter.run): that
// one is the test publisher's, never the subscriber's (SUB and DEALER),
// and it is the only goroutine let through.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
