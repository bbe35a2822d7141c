package sim

import (
	"net/http"
	"strconv"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// promptIDs returns the ids of prompt p of req (body is what the Tokenizer
// reads for it) and whether it has them.
func promptIDs(req *genRequest, p prompt, body []byte, tok Tokenizer) ([]int, bool, error) {
	switch {
	case req.kind == kindChat:
		if ider, ok := tok.(ChatTokenIDer); ok {
			ids, err := ider.ChatTokenIDs(body)
			return ids, true, err
		}
	case p.ids:
		v, err := ojson.Parse(p.raw, ojson.DefaultMaxDepth)
		if err != nil {
			return nil, false, err
		}
		ids := make([]int, len(v.Items))
		for i, it := range v.Items {
			n, _ := it.Int()
			ids[i] = int(n)
		}
		return ids, true, nil
	default:
		if ider, ok := tok.(CompletionTokenIDer); ok {
			ids, err := ider.CompletionTokenIDs(body)
			return ids, true, err
		}
	}
	return nil, false, nil
}

// prefixRequest builds what the prefix cache needs of a generation: its
// prompts' ids and block hashes (computed here, outside the server's lock),
// and the LoRA adapter and cache_salt that key its blocks.
func (s *Server) prefixRequest(req *genRequest, v *ojson.Value, cfg Config, model string) *prefixReq {
	if s.cache == nil {
		return nil
	}
	p := &prefixReq{}
	lora := ""
	if model != cfg.Model {
		for i, l := range cfg.LoRAModules {
			if l.Name == model {
				id := i + 1 // vLLM's lora_int_id counts from 1
				p.loraID, p.loraName, lora = &id, &l.Name, l.Name
			}
		}
	}
	salt := ""
	if c := v.Get("cache_salt"); c != nil && c.Kind == ojson.String {
		salt = c.Str
	}
	for _, ids := range req.promptIDs {
		if ids == nil {
			continue
		}
		p.prompts = append(p.prompts, prefixPrompt{ids: ids, hashes: s.cache.hashBlocks(ids, cfg.BlockSize, lora, salt)})
	}
	return p
}

// resetPrefixCache serves POST /reset_prefix_cache as vLLM does (it mounts
// it with VLLM_SERVER_DEV_MODE; the simulator with PrefixCaching): 200 with
// an empty body, or 409 "Prefix cache reset failed." while running requests
// hold cached blocks, unless ?reset_running_requests=true.
func (s *Server) resetPrefixCache(w http.ResponseWriter, r *http.Request) {
	if s.cache == nil {
		writeAPIError(w, httpError(http.StatusNotFound, ""))
		return
	}
	if !allow(w, r, http.MethodPost) {
		return
	}
	running := false
	if q := r.URL.Query().Get("reset_running_requests"); q != "" {
		b, ok := parseQueryBool(q)
		if !ok {
			writeAPIError(w, requestValidationError("bool_parsing", []any{"query", "reset_running_requests"},
				"Input should be a valid boolean, unable to interpret input", strp(q)))
			return
		}
		running = b
	}
	if !s.ResetPrefixCache(running) {
		writeAPIError(w, httpError(http.StatusConflict, "Prefix cache reset failed."))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// parseQueryBool is pydantic's lax bool for query strings.
func parseQueryBool(q string) (bool, bool) {
	switch q {
	case "1", "true", "True", "TRUE", "yes", "on", "y", "t":
		return true, true
	case "0", "false", "False", "FALSE", "no", "off", "n", "f":
		return false, true
	}
	b, err := strconv.ParseBool(q)
	return b, err == nil
}
