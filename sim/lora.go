package sim

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// LoRAModule is a LoRA adapter the server has loaded: one of vLLM's
// --lora-modules name=path at start, or a POST /v1/load_lora_adapter at
// runtime. Requests name it by Name; /v1/models lists it with root Path
// and parent the served model.
type LoRAModule struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// loraNamed returns the loaded adapter called name.
func (c Config) loraNamed(name string) (LoRAModule, bool) {
	i := slices.IndexFunc(c.LoRAModules, func(m LoRAModule) bool { return m.Name == name })
	if i < 0 {
		return LoRAModule{}, false
	}
	return c.LoRAModules[i], true
}

func isLoRA(cfg Config, name string) bool {
	_, ok := cfg.loraNamed(name)
	return ok
}

// servedName is the model name an answer carries: the adapter's name for
// a request naming a loaded adapter (vLLM's model_name(lora_request)),
// else the served model's.
func servedName(v *ojson.Value, cfg Config) string {
	if m := v.Get("model"); m != nil && m.Kind == ojson.String {
		if _, ok := cfg.loraNamed(m.Str); ok {
			return m.Str
		}
	}
	return cfg.Model
}

// serveLoRA serves POST /v1/load_lora_adapter and /v1/unload_lora_adapter,
// which vLLM mounts only with VLLM_ALLOW_RUNTIME_LORA_UPDATING
// (Config.RuntimeLoRA); otherwise they are unknown paths. It reports
// false for another path.
func (s *Server) serveLoRA(w http.ResponseWriter, r *http.Request, body []byte, cfg Config) bool {
	load := r.URL.Path == "/v1/load_lora_adapter"
	if !load && r.URL.Path != "/v1/unload_lora_adapter" {
		return false
	}
	if !cfg.RuntimeLoRA {
		writeAPIError(w, httpError(http.StatusNotFound, ""))
		return true
	}
	if !allow(w, r, http.MethodPost) {
		return true
	}
	// validate_json_request, then pydantic's LoadLoRAAdapterRequest or
	// UnloadLoRAAdapterRequest.
	if e := checkContentType(r); e != nil {
		writeAPIError(w, e)
		return true
	}
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil || v.Kind != ojson.Object {
		writeAPIError(w, requestValidationError("json_invalid", []any{"body", 0}, "JSON decode error", nil))
		return true
	}
	fields := []string{"lora_name", "lora_path"}
	if !load {
		fields = fields[:1]
	}
	str := map[string]string{}
	for _, f := range fields {
		fv := v.Get(f)
		switch {
		case fv == nil:
			writeAPIError(w, fieldError(f, "missing", "Field required"))
			return true
		case fv.Kind != ojson.String:
			writeAPIError(w, fieldError(f, "string_type", "Input should be a valid string"))
			return true
		}
		str[f] = fv.Str
	}
	inplace := false
	if iv := v.Get("load_inplace"); load && iv != nil && !iv.IsNull() {
		if iv.Kind != ojson.Bool {
			writeAPIError(w, fieldError("load_inplace", "bool_type", "Input should be a valid boolean"))
			return true
		}
		inplace = iv.Bool
	}
	name := str["lora_name"]
	var e *apiError
	var msg string
	if load {
		e = s.loadLoRA(LoRAModule{Name: name, Path: str["lora_path"]}, inplace)
		msg = fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", name)
	} else {
		e = s.unloadLoRA(name)
		msg = fmt.Sprintf("Success: LoRA adapter '%s' removed successfully.", name)
	}
	if e != nil {
		writeAPIError(w, e)
		return true
	}
	// Starlette's Response(content=str) without a media type: no
	// Content-Type header at all.
	w.Header()["Content-Type"] = nil
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(msg))
	return true
}

// loadLoRA is OpenAIServingModels.load_lora_adapter: both fields required,
// a loaded name refused unless load_inplace replaces it. Any path loads:
// the simulator has no weights to find.
func (s *Server) loadLoRA(m LoRAModule, inplace bool) *apiError {
	if m.Name == "" || m.Path == "" {
		return &apiError{Status: http.StatusBadRequest, Type: "InvalidUserInput",
			Message: "Both 'lora_name' and 'lora_path' must be provided."}
	}
	var e *apiError
	s.Update(func(c *Config) {
		mods := slices.Clone(c.LoRAModules)
		if i := slices.IndexFunc(mods, func(l LoRAModule) bool { return l.Name == m.Name }); i >= 0 {
			if !inplace {
				e = &apiError{Status: http.StatusBadRequest, Type: "InvalidUserInput",
					Message: fmt.Sprintf("The lora adapter '%s' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", m.Name)}
				return
			}
			mods[i] = m
		} else {
			mods = append(mods, m)
		}
		c.LoRAModules = mods
	})
	return e
}

// unloadLoRA is OpenAIServingModels.unload_lora_adapter.
func (s *Server) unloadLoRA(name string) *apiError {
	if name == "" {
		return &apiError{Status: http.StatusBadRequest, Type: "InvalidUserInput",
			Message: "'lora_name' needs to be provided to unload a LoRA adapter."}
	}
	var e *apiError
	s.Update(func(c *Config) {
		if _, ok := c.loraNamed(name); !ok {
			e = &apiError{Status: http.StatusNotFound, Type: "NotFoundError",
				Message: fmt.Sprintf("The lora adapter '%s' cannot be found.", name)}
			return
		}
		c.LoRAModules = slices.DeleteFunc(slices.Clone(c.LoRAModules), func(l LoRAModule) bool { return l.Name == name })
	})
	return e
}
