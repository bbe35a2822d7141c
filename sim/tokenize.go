package sim

import (
	"net/http"

	"github.com/maitred-dev/maitred/internal/ojson"
)

type tokenizeResponse struct {
	Count       int       `json:"count"`
	MaxModelLen int       `json:"max_model_len"`
	Tokens      []int     `json:"tokens"`
	TokenStrs   *[]string `json:"token_strs"`
}

// tokenize serves POST /tokenize in its two forms (chat: messages; or
// completion: prompt), with vLLM's defaults (add_generation_prompt true;
// add_special_tokens false for chat, true for prompts) left to the
// Tokenizer, which receives the body as is. Tokens holds real ids when the
// Tokenizer implements ChatTokenIDer / CompletionTokenIDer and is empty
// otherwise (count is still exact). Like renderer-era vLLM, a prompt longer
// than max_model_len is a 400.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request, body []byte) {
	cfg := s.Config()
	if e := checkContentType(r); e != nil {
		writeAPIError(w, e)
		return
	}
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		writeAPIError(w, requestValidationError("json_invalid", []any{"body"}, "JSON decode error", nil))
		return
	}
	if v.Kind != ojson.Object {
		writeAPIError(w, requestValidationError("model_attributes_type", []any{"body"},
			"Input should be a valid dictionary or object to extract fields from", strp("body")))
		return
	}
	if m := v.Get("model"); !m.IsNull() && m.Kind != ojson.String {
		writeAPIError(w, fieldError("model", "string_type", "Input should be a valid string"))
		return
	}
	chat := v.Has("messages")
	if chat {
		if m := v.Get("messages"); m.Kind != ojson.Array {
			writeAPIError(w, fieldError("messages", "list_type", "Input should be a valid list"))
			return
		}
	} else if p := v.Get("prompt"); p == nil {
		writeAPIError(w, fieldError("prompt", "missing", "Field required"))
		return
	} else if p.Kind != ojson.String {
		writeAPIError(w, fieldError("prompt", "string_type", "Input should be a valid string"))
		return
	}
	if e := checkModel(v, cfg); e != nil {
		writeAPIError(w, e)
		return
	}

	tok := cfg.Tokenizer
	var ids []int
	var n int
	if chat {
		if ider, ok := tok.(ChatTokenIDer); ok {
			ids, err = ider.ChatTokenIDs(body)
			n = len(ids)
		} else {
			n, err = tok.ChatPromptTokens(body)
		}
	} else {
		if ider, ok := tok.(CompletionTokenIDer); ok {
			ids, err = ider.CompletionTokenIDs(body)
			n = len(ids)
		} else {
			n, err = tok.CompletionPromptTokens(body)
		}
	}
	if err != nil {
		writeAPIError(w, &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: err.Error()})
		return
	}
	if n > cfg.MaxModelLen {
		writeAPIError(w, contextError(cfg.MaxModelLen, 0, n, true))
		return
	}
	if ids == nil {
		ids = []int{}
	}
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: n, MaxModelLen: cfg.MaxModelLen, Tokens: ids})
}
