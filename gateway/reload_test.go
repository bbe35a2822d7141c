package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
)

// TestReloadRemovedModelAnswersItsQueue: a reload that removes a model
// answers the requests waiting in its queue at once (404 model_not_found
// in OpenAI's envelope, not a hang), lets the one running on its backend
// finish, and answers later requests for it as for a model never
// configured; a model the reload adds is served once its backend is
// ready.
func TestReloadRemovedModelAnswersItsQueue(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	hold := newFakeBackend(t, "x", func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		io.WriteString(w, `{"choices":[{"text":"done"}]}`)
	})
	plain := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"choices":[]}`) })
	added := newFakeBackend(t, "y", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"choices":[{"text":"y"}]}`) })
	var cfg config.Config
	tg := startGateway(t, func(c *config.Config) {
		c.Models = append(c.Models, config.ModelConfig{Name: "x", QueueTimeout: config.Duration(60e9),
			Backends: []config.BackendConfig{{URL: hold.URL, MaxInFlight: 1}}})
		cfg = *c
	}, plain.URL)
	first := tg.live().byName["m"] // the runtime New built for m

	running := make(chan string, 1)
	go func() {
		res := tg.post(t, "/v1/completions", `{"model":"x","prompt":"a"}`)
		running <- readBodyT(t, res)
	}()
	<-started
	queued := make(chan *http.Response, 1)
	go func() { queued <- tg.post(t, "/v1/completions", `{"model":"x","prompt":"b"}`) }()
	eventually(t, "one queued", func() bool { return tg.live().byName["x"].pool.Advice().Depth == 1 })

	next := cfg
	next.Models = []config.ModelConfig{cfg.Models[0], {Name: "y", Backends: []config.BackendConfig{{URL: added.URL}}}}
	res, err := tg.Reload(next, nil)
	if err != nil || len(res.Removed) != 1 || res.Removed[0] != "x" || len(res.Added) != 1 {
		t.Fatalf("reload: %+v %v", res, err)
	}
	q := <-queued
	body := readBodyT(t, q)
	if q.StatusCode != http.StatusNotFound || str(decodeEnvelope(t, body).Error.Code) != "model_not_found" || !strings.Contains(body, "removed") {
		t.Fatalf("queued request: %d %s", q.StatusCode, body)
	}
	close(release)
	if got := <-running; !strings.Contains(got, "done") {
		t.Fatalf("the request running on the removed model's backend: %s", got)
	}
	status := func(model string) (int, string) {
		r := tg.post(t, "/v1/completions", `{"model":"`+model+`","prompt":"c"}`)
		return r.StatusCode, readBodyT(t, r)
	}
	if code, body := status("x"); code != http.StatusNotFound {
		t.Fatalf("a new request for the removed model: %d %s", code, body)
	}
	if code, body := status("y"); code != http.StatusServiceUnavailable {
		t.Fatalf("the added model before its backend is probed: %d %s", code, body)
	}
	tg.Fleet.ProbeAll(t.Context())
	if code, body := status("y"); code != http.StatusOK {
		t.Fatalf("the added model once ready: %d %s", code, body)
	}
	if got := tg.live().byName["m"]; got == nil || got == first || got.pool != first.pool {
		t.Fatal("the model that stayed lost its pool")
	}
	if n := admission.ModelRemoved.String(); !strings.Contains(tg.gathered(t), `outcome="`+n+`"`) {
		t.Errorf("no admission outcome %s counted", n)
	}
}
