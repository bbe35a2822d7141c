package admission

import (
	"reflect"
	"strings"
	"testing"
)

// TestInvocationsDispatchesByShape: an /invocations body is checked as the
// first API it reads as, in vLLM's order, and decided exactly as that
// API's own endpoint decides it (counts, rejections); a body no API reads
// is refused before any backend.
func TestInvocationsDispatchesByShape(t *testing.T) {
	d := newDoor(t, nil)
	long := strings.Repeat("word ", 200)
	for _, tc := range []struct {
		body string
		want Endpoint
	}{
		{`{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`, Chat},
		{`{"model":"demo","messages":[{"role":"user","content":"hi"}],"prompt":"also","input":"x"}`, Chat}, // chat comes first
		{`{"model":"demo","prompt":"hello there","max_tokens":3}`, Completions},
		{`{"model":"demo","prompt":["a","b"]}`, Completions},
		{`{"model":"demo","input":"hello there"}`, Embeddings},
		{`{"model":"demo","input":["a","b"],"query":"q","documents":["d"]}`, Embeddings}, // embeddings before rerank
		{`{"model":"demo","text_1":"a","text_2":["b","c"]}`, Score},
		{`{"model":"demo","queries":"a","documents":["b"]}`, Score},
		{`{"model":"demo","query":"q","documents":["a","b"],"top_n":1}`, Rerank},
		// Refused as the API they read as would refuse them.
		{`{"model":"demo","messages":[{"role":"user","content":"` + long + `"}],"max_tokens":5}`, Chat},
		{`{"model":"demo","prompt":"hi","max_tokens":0}`, Completions},
		{`{"model":"nope","input":"x"}`, Embeddings},
		{`{"model":"demo","query":["q"],"documents":["a"]}`, Rerank},
	} {
		got, gotRej := d.Check(Invocations, []byte(tc.body))
		want, wantRej := d.Check(tc.want, []byte(tc.body))
		if !reflect.DeepEqual(gotRej, wantRej) {
			t.Errorf("%s: rejection %+v, want %s's %+v", tc.body, gotRej, tc.want, wantRej)
			continue
		}
		if wantRej != nil {
			continue
		}
		if got.Endpoint != tc.want {
			t.Errorf("%s: checked as %s, want %s", tc.body, got.Endpoint, tc.want)
		}
		got.Request, want.Request = nil, nil // parsed twice: equal content, other pointers
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decision %+v, want %s's %+v", tc.body, got, tc.want, want)
		}
	}
	for _, body := range []string{`{"model":"demo"}`, `{"model":"demo","text_1":"only one side"}`, `{"model":"demo","Input":"x"}`} {
		_, rej := d.Check(Invocations, []byte(body))
		if rej == nil || rej.Status != 400 || rej.Reason != InvalidInput || !strings.Contains(rej.Message, "Cannot find suitable handler") {
			t.Errorf("%s: %+v, want a 400 naming the shapes /invocations takes", body, rej)
		}
	}
}
