package sim

import "net/http"

// poolingRoutes are vLLM's pooling endpoints and their family.
var poolingRoutes = map[string]poolKind{
	"/v1/embeddings": poolEmbed,
	"/pooling":       poolPooling,
	"/classify":      poolClassify,
	"/score":         poolScore,
	"/v1/score":      poolScore,
	"/rerank":        poolRerank,
	"/v1/rerank":     poolRerank,
	"/v2/rerank":     poolRerank,
}

// engineRoute reports whether path is served by the (simulated) engine:
// generation and pooling. Their requests count in Stats.
func engineRoute(path string) bool {
	_, pool := poolingRoutes[path]
	return pool || path == "/v1/chat/completions" || path == "/v1/completions"
}

// serveMoreV1 serves the /v1 routes of the pooling, render and detokenize
// families; body is read and recorded, auth done. It reports false for a
// path it does not serve.
func (s *Server) serveMoreV1(w http.ResponseWriter, r *http.Request, body []byte) bool {
	path := r.URL.Path
	switch path {
	case "/v1/chat/completions/render", "/v1/completions/render":
		if allow(w, r, http.MethodPost) {
			k := kindChat
			if path == "/v1/completions/render" {
				k = kindCompletion
			}
			s.render(w, r, body, k)
		}
		return true
	}
	k, ok := poolingRoutes[path]
	if !ok {
		return false
	}
	if allow(w, r, http.MethodPost) {
		s.pool(w, r, body, k)
	}
	return true
}

// serveMore serves the routes outside /v1 of those families (vLLM puts no
// API key on them): /detokenize, /pooling, /classify, /score, /rerank,
// /v2/rerank. It reports false for a path it does not serve.
func (s *Server) serveMore(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	k, pool := poolingRoutes[path]
	if !pool && path != "/detokenize" {
		return false
	}
	if !allow(w, r, http.MethodPost) {
		return true
	}
	body, ok := readBody(w, r)
	if !ok {
		return true
	}
	s.record(r, body)
	if !pool {
		s.detokenize(w, r, body)
		return true
	}
	s.count(func(st *Stats) { st.Requests++ })
	s.pool(w, r, body, k)
	return true
}
