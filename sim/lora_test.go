package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

type loraCard struct {
	ID          string  `json:"id"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen *int    `json:"max_model_len"`
}

func (e *testEnv) cards() map[string]loraCard {
	e.t.Helper()
	status, _, body := e.get("/v1/models")
	if status != http.StatusOK {
		e.t.Fatalf("/v1/models: %d %s", status, body)
	}
	var list struct{ Data []loraCard }
	if err := json.Unmarshal(body, &list); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]loraCard{}
	for _, c := range list.Data {
		out[c.ID] = c
	}
	return out
}

// A configured adapter is listed as vLLM lists one (root its path, parent
// the base model, max_model_len null) and served under its own name; a
// name not loaded gets vLLM's 404; runtime loading and unloading answer
// in vLLM's words and change both.
func TestLoRAAdapters(t *testing.T) {
	e := newEnv(t, Config{Model: "base", LoRAModules: []LoRAModule{{Name: "sql", Path: "/loras/sql"}}, RuntimeLoRA: true})
	cards := e.cards()
	if c := cards["base"]; c.Parent != nil || c.MaxModelLen == nil {
		t.Fatalf("base card: %+v", c)
	}
	if c, ok := cards["sql"]; !ok || c.Root != "/loras/sql" || c.Parent == nil || *c.Parent != "base" || c.MaxModelLen != nil {
		t.Fatalf("adapter card: %+v (listed %v)", c, ok)
	}

	client := e.openai("")
	chat, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "sql", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	if err != nil || chat.Model != "sql" {
		t.Fatalf("chat with the adapter: %v, model %q", err, chat.Model)
	}
	status, _, body := e.post("/v1/completions", `{"model":"math","prompt":"hi"}`)
	if status != http.StatusNotFound || !strings.Contains(string(body), "The model `math` does not exist.") {
		t.Fatalf("an adapter not loaded: %d %s", status, body)
	}

	status, hdr, body := e.post("/v1/load_lora_adapter", `{"lora_name":"math","lora_path":"/loras/math"}`)
	if status != http.StatusOK || string(body) != "Success: LoRA adapter 'math' added successfully." || hdr.Get("Content-Type") != "" {
		t.Fatalf("load: %d %q %q", status, hdr.Get("Content-Type"), body)
	}
	if c := e.cards()["math"]; c.Root != "/loras/math" {
		t.Fatalf("loaded adapter not listed: %+v", c)
	}
	status, _, body = e.post("/v1/completions", `{"model":"math","prompt":"hi"}`)
	if status != http.StatusOK || !strings.Contains(string(body), `"model":"math"`) {
		t.Fatalf("completion with the loaded adapter: %d %s", status, body)
	}
	status, _, body = e.post("/v1/load_lora_adapter", `{"lora_name":"math","lora_path":"/loras/math"}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), `"type":"InvalidUserInput"`) ||
		!strings.Contains(string(body), "The lora adapter 'math' has already been loaded.") {
		t.Fatalf("load twice: %d %s", status, body)
	}
	status, _, body = e.post("/v1/load_lora_adapter", `{"lora_name":"x","lora_path":""}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "Both 'lora_name' and 'lora_path' must be provided.") {
		t.Fatalf("load without a path: %d %s", status, body)
	}
	status, _, body = e.post("/v1/load_lora_adapter", `{"lora_name":"x"}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "Field required") {
		t.Fatalf("load missing lora_path: %d %s", status, body)
	}

	status, _, body = e.post("/v1/unload_lora_adapter", `{"lora_name":"math"}`)
	if status != http.StatusOK || string(body) != "Success: LoRA adapter 'math' removed successfully." {
		t.Fatalf("unload: %d %s", status, body)
	}
	if _, ok := e.cards()["math"]; ok {
		t.Fatal("unloaded adapter still listed")
	}
	status, _, body = e.post("/v1/unload_lora_adapter", `{"lora_name":"math"}`)
	if status != http.StatusNotFound || !strings.Contains(string(body), `"type":"NotFoundError"`) ||
		!strings.Contains(string(body), "The lora adapter 'math' cannot be found.") {
		t.Fatalf("unload twice: %d %s", status, body)
	}
	status, _, _ = e.post("/v1/chat/completions", `{"model":"math","messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusNotFound {
		t.Fatalf("chat with the unloaded adapter: %d", status)
	}
}

// Without VLLM_ALLOW_RUNTIME_LORA_UPDATING the load routes do not exist.
func TestLoRARuntimeUpdatingOff(t *testing.T) {
	e := newEnv(t, Config{})
	status, _, body := e.post("/v1/load_lora_adapter", `{"lora_name":"math","lora_path":"/loras/math"}`)
	if status != http.StatusNotFound {
		t.Fatalf("load without RuntimeLoRA: %d %s", status, body)
	}
}
