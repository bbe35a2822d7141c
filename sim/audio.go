package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// Speech to text as vLLM serves it for a Whisper-like model
// (vllm/entrypoints/openai/speech_to_text): POST /v1/audio/transcriptions
// and /v1/audio/translations take multipart/form-data with a `file` upload
// and form fields. The simulator reads the upload as a stream, hashing it on
// the way and never holding it: the transcript is the deterministic lorem
// text starting at word (hash mod 19), and the audio lasts size/32000
// seconds (16 kHz, 16-bit mono PCM).

const (
	transcriptionsPath = "/v1/audio/transcriptions"
	translationsPath   = "/v1/audio/translations"

	// maxAudioFileMB is VLLM_MAX_AUDIO_CLIP_FILESIZE_MB's default.
	maxAudioFileMB = 25
	// maxFormField bounds one non-file form field.
	maxFormField = 1 << 20
	// audioBytesPerSecond is 16 kHz 16-bit mono PCM.
	audioBytesPerSecond = 32000
	// whisperPromptTokens is the decoder prompt without a text prompt
	// (<|startoftranscript|><|lang|><|task|><|notimestamps|>).
	whisperPromptTokens = 4
)

func isAudioPath(path string) bool { return path == transcriptionsPath || path == translationsPath }

// serveAudio is the /v1 pipeline for the upload routes: record (without the
// body), count, authorize, route.
func (s *Server) serveAudio(w http.ResponseWriter, r *http.Request) {
	s.record(r, nil)
	post := r.Method == http.MethodPost
	if post {
		s.count(func(st *Stats) { st.Requests++ })
	}
	cfg := s.Config()
	if cfg.APIKey != "" && r.Method != http.MethodOptions &&
		r.Header.Get("Authorization") != "Bearer "+cfg.APIKey {
		if post {
			s.count(func(st *Stats) { st.Rejected++ })
		}
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
		return
	}
	if !allow(w, r, http.MethodPost) {
		return
	}
	s.audio(w, r, cfg, r.URL.Path == translationsPath)
}

// audioForm is the parsed form: the upload's size and hash, and the fields.
type audioForm struct {
	hasFile   bool   // a `file` part with a filename
	fileIsStr bool   // a `file` field without a filename
	size      int64  // upload bytes
	hash      uint64 // FNV-1a of the upload
	fields    map[string]string
}

// readAudioForm parses the body as FastAPI does for Form() models: a
// multipart or urlencoded body gives fields, anything else none. The file
// part is streamed through the hash.
func readAudioForm(w http.ResponseWriter, r *http.Request) (*audioForm, *apiError) {
	f := &audioForm{fields: map[string]string{}}
	body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	tooLarge := func(err error) *apiError {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return httpError(http.StatusRequestEntityTooLarge, "")
		}
		return httpError(http.StatusBadRequest, "There was an error parsing the body")
	}
	switch mt {
	case "multipart/form-data":
		if params["boundary"] == "" {
			return nil, httpError(http.StatusBadRequest, "There was an error parsing the body")
		}
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				return f, nil
			}
			if err != nil {
				return nil, tooLarge(err)
			}
			name := part.FormName()
			if name == "file" && part.FileName() != "" {
				h := fnv.New64a()
				n, err := io.Copy(h, part)
				if err != nil {
					return nil, tooLarge(err)
				}
				f.hasFile, f.fileIsStr, f.size, f.hash = true, false, n, h.Sum64()
				continue
			}
			v, err := io.ReadAll(io.LimitReader(part, maxFormField+1))
			if err != nil {
				return nil, tooLarge(err)
			}
			if len(v) > maxFormField {
				return nil, httpError(http.StatusBadRequest, "There was an error parsing the body")
			}
			if name == "file" {
				f.fileIsStr = !f.hasFile
			}
			f.fields[name] = string(v)
		}
	case "application/x-www-form-urlencoded":
		b, err := io.ReadAll(io.LimitReader(body, maxFormField+1))
		if err != nil {
			return nil, tooLarge(err)
		}
		vals, err := url.ParseQuery(string(b))
		if err != nil || len(b) > maxFormField {
			return nil, httpError(http.StatusBadRequest, "There was an error parsing the body")
		}
		for k, v := range vals {
			f.fields[k] = v[len(v)-1]
			if k == "file" {
				f.fileIsStr = true
			}
		}
	}
	// Any other content type: starlette yields an empty form, and the
	// missing file is the error.
	_, _ = io.Copy(io.Discard, body)
	return f, nil
}

// audioRequest is a validated TranscriptionRequest / TranslationRequest.
type audioRequest struct {
	model         *string
	language      string
	prompt        string
	format        string
	temperature   float64
	stream        bool
	includeUsage  bool
	continuousUsg bool
	maxCompletion *int
}

// validate does pydantic's part: the model validator (a string `file`; stream
// options without stream, judged on the raw strings as vLLM does), the
// required file and the field types.
func (f *audioForm) validate() (*audioRequest, *apiError) {
	if f.fileIsStr {
		return nil, httpError(http.StatusUnprocessableEntity, "Expected 'file' to be a file-like object, not 'str'.")
	}
	if f.fields["stream"] == "" {
		for _, so := range []string{"stream_include_usage", "stream_continuous_usage_stats"} {
			if f.fields[so] != "" {
				return nil, modelValidatorError("Stream options can only be defined when `stream=True`.", so)
			}
		}
	}
	if !f.hasFile {
		return nil, fieldError("file", "missing", "Field required")
	}
	req := &audioRequest{format: "json", language: f.fields["language"], prompt: f.fields["prompt"]}
	if m, ok := f.fields["model"]; ok {
		req.model = &m
	}
	if v, ok := f.fields["response_format"]; ok {
		switch v {
		case "json", "text", "srt", "verbose_json", "diarized_json", "vtt":
			req.format = v
		default:
			return nil, fieldError("response_format", "literal_error",
				"Input should be 'json', 'text', 'srt', 'verbose_json', 'diarized_json' or 'vtt'")
		}
	}
	if v, ok := f.fields["temperature"]; ok {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fieldError("temperature", "float_parsing", "Input should be a valid number, unable to parse string as a number")
		}
		req.temperature = x
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"stream", &req.stream}, {"stream_include_usage", &req.includeUsage}, {"stream_continuous_usage_stats", &req.continuousUsg}} {
		if v, ok := f.fields[b.name]; ok {
			x, ok := pyBool(v)
			if !ok {
				return nil, fieldError(b.name, "bool_parsing", "Input should be a valid boolean, unable to interpret input")
			}
			*b.dst = x
		}
	}
	if v, ok := f.fields["max_completion_tokens"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fieldError("max_completion_tokens", "int_parsing", "Input should be a valid integer, unable to parse string as an integer")
		}
		req.maxCompletion = &n
	}
	return req, nil
}

// --- wire types ------------------------------------------------------------

type audioDuration struct {
	Type    string `json:"type"`
	Seconds int    `json:"seconds"`
}

type transcriptionResponse struct {
	Text  string        `json:"text"`
	Usage audioDuration `json:"usage"`
}

type translationResponse struct {
	Text string `json:"text"`
}

type audioSegment struct {
	ID               int      `json:"id"`
	AvgLogprob       float64  `json:"avg_logprob"`
	CompressionRatio float64  `json:"compression_ratio"`
	End              float64  `json:"end"`
	NoSpeechProb     *float64 `json:"no_speech_prob"`
	Seek             int      `json:"seek"`
	Start            float64  `json:"start"`
	Temperature      float64  `json:"temperature"`
	Text             string   `json:"text"`
	Tokens           []int    `json:"tokens"`
}

type audioVerbose struct {
	Duration string         `json:"duration"`
	Language string         `json:"language"`
	Text     string         `json:"text"`
	Segments []audioSegment `json:"segments"`
	Words    *struct{}      `json:"words"`
}

type audioDelta struct {
	Content string `json:"content"`
}

// audioChoice is a chunk's choice while generating (exclude_unset: the
// delta only); audioChoiceFinal carries finish_reason and a null
// stop_reason.
type audioChoice struct {
	Delta audioDelta `json:"delta"`
}

type audioChoiceFinal struct {
	Delta        audioDelta `json:"delta"`
	FinishReason string     `json:"finish_reason"`
	StopReason   *string    `json:"stop_reason"`
}

type audioChunk struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   *string      `json:"model"`
	Choices []any        `json:"choices"`
	Usage   *streamUsage `json:"usage,omitempty"`
}

// audioUsageChunk is the final usage chunk, serialised with exclude_none
// (no model when the form had none).
type audioUsageChunk struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   *string      `json:"model,omitempty"`
	Choices []any        `json:"choices"`
	Usage   *streamUsage `json:"usage"`
}

// --- handler -------------------------------------------------------------------

func (s *Server) audio(w http.ResponseWriter, r *http.Request, cfg Config, translate bool) {
	arrival := time.Now()
	ctx := r.Context()
	log := s.log.With(zap.String("route", r.URL.Path))
	if s.admissionFaults(ctx, w, cfg, log, writeAPIError) {
		return
	}
	reject := func(e *apiError) { s.rejectWith(w, e, writeAPIError) }
	form, e := readAudioForm(w, r)
	if e != nil {
		reject(e)
		return
	}
	req, e := form.validate()
	if e != nil {
		reject(e)
		return
	}
	if e := checkAudioRequest(req, form, cfg); e != nil {
		reject(e)
		return
	}
	P, budget, e := audioPlan(req, cfg)
	if e != nil {
		reject(e)
		return
	}
	task := "transcribe"
	if translate {
		task = "translate"
	}
	reqID := r.Header.Get("X-Request-Id")
	if reqID == "" {
		reqID = randomID()
	}
	id := task + "-" + reqID
	duration := float64(form.size) / audioBytesPerSecond
	j := s.newJob(cfg, log.With(zap.String("request_id", id)), arrival, P, budget)
	j.offset = int(form.hash % uint64(len(words)))
	j.log.Debug("sim request accepted", zap.Int64("audio_bytes", form.size), zap.Int("prompt_tokens", P), zap.Bool("stream", req.stream))

	if !req.stream {
		if !j.runWhole(ctx, w, writeAPIError) {
			return
		}
		text := j.text.String()
		var out any
		switch {
		case req.format == "verbose_json":
			out = verboseTranscript(req, j, text, duration)
		case translate:
			out = translationResponse{Text: text}
		default:
			out = transcriptionResponse{Text: text, Usage: audioDuration{Type: "duration", Seconds: int(math.Ceil(duration))}}
		}
		writeJSON(w, http.StatusOK, out)
		j.done()
		return
	}
	object := "transcription.chunk"
	if translate {
		object = "translation.chunk"
	}
	s.audioStream(ctx, w, j, req, audioChunk{ID: id, Object: object, Created: arrival.Unix(), Model: req.model}, P)
}

// checkAudioRequest runs vLLM's checks after the form's validation, in its
// order: the model, FailStatus, the response format, the file size.
func checkAudioRequest(req *audioRequest, form *audioForm, cfg Config) *apiError {
	if req.model != nil && *req.model != "" && *req.model != cfg.Model && !isLoRA(cfg, *req.model) {
		return &apiError{Status: http.StatusNotFound, Type: "NotFoundError",
			Message: fmt.Sprintf("The model `%s` does not exist.", *req.model), Param: strp("model")}
	}
	if cfg.FailStatus > 0 {
		return failError(cfg.FailStatus, cfg.FailMessage)
	}
	switch {
	case req.format != "text" && req.format != "json" && req.format != "verbose_json":
		return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError",
			Message: "Currently only support response_format: `text`, `json` or `verbose_json`"}
	case req.format == "verbose_json" && req.stream:
		return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError",
			Message: "verbose_json format doesn't support streaming case"}
	}
	if mb := float64(form.size) / (1 << 20); mb > maxAudioFileMB {
		return validationError("Maximum file size exceeded", "audio_filesize_mb", pyFloat(mb))
	}
	return nil
}

// audioPlan is the decoder prompt's length (the Whisper prompt plus the
// text prompt) and the output budget.
func audioPlan(req *audioRequest, cfg Config) (P, budget int, e *apiError) {
	P = whisperPromptTokens
	if req.prompt != "" {
		n, err := cfg.Tokenizer.CompletionPromptTokens(marshal(map[string]any{"prompt": req.prompt, "add_special_tokens": false}))
		if err != nil {
			return 0, 0, &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: err.Error()}
		}
		P += n
	}
	budget = cfg.MaxModelLen
	if req.maxCompletion != nil {
		budget = min(budget, *req.maxCompletion)
	}
	if budget < 1 {
		return 0, 0, validationError(fmt.Sprintf("max_tokens must be at least 1, got %d.", budget), "max_tokens", budget)
	}
	return P, budget, nil
}

// audioStream sends the streamed transcript: a chunk per token (head
// carries the id, object, created and model of every chunk), the finish
// reason, the usage chunk when asked for, then [DONE].
func (s *Server) audioStream(ctx context.Context, w http.ResponseWriter, j *job, req *audioRequest, head audioChunk, P int) {
	sw := j.startStream(w)
	if sw == nil {
		return
	}
	usage := func() *streamUsage {
		return &streamUsage{PromptTokens: P, CompletionTokens: j.generated, TotalTokens: P + j.generated}
	}
	send := func(choice any) error {
		c := head
		c.Choices = []any{choice}
		if req.includeUsage && req.continuousUsg {
			c.Usage = usage()
		}
		return sw.frame("", marshal(c))
	}
	err := j.run(ctx, func(step int, tok string) error {
		if step == j.target-1 && j.finish == "length" {
			return send(audioChoiceFinal{Delta: audioDelta{Content: tok}, FinishReason: "length"})
		}
		if err := send(audioChoice{Delta: audioDelta{Content: tok}}); err != nil {
			return err
		}
		if step == j.target-1 { // the EOS step
			return send(audioChoiceFinal{Delta: audioDelta{}, FinishReason: "stop"})
		}
		return nil
	})
	if err != nil {
		if err == errStopped {
			_ = sw.frame("", marshal(generationError().envelope()))
			_ = sw.frame("", []byte("[DONE]"))
		}
		return
	}
	if req.includeUsage {
		if err := sw.frame("", marshal(audioUsageChunk{ID: head.ID, Object: head.Object, Created: head.Created, Model: head.Model,
			Choices: []any{}, Usage: usage()})); err != nil {
			_ = j.fail(ctx, errClientGone, "write")
			return
		}
	}
	if err := sw.frame("", []byte("[DONE]")); err != nil {
		_ = j.fail(ctx, errClientGone, "write")
		return
	}
	j.done()
}

// verboseTranscript is the verbose_json answer: one segment spanning the
// audio.
func verboseTranscript(req *audioRequest, j *job, text string, duration float64) audioVerbose {
	lang := req.language
	if lang == "" {
		lang = "en"
	}
	tokens := make([]int, j.generated)
	for i := range tokens {
		tokens[i] = pieceID(tokenText(j.offset, i))
	}
	ratio := 1.0
	if len(text) > 0 {
		ratio = float64(len(text)) / float64(len(text)/2+1)
	}
	return audioVerbose{
		Duration: pyFloat(duration), Language: lang, Text: text,
		Segments: []audioSegment{{
			ID: 0, AvgLogprob: -0.25, CompressionRatio: ratio, End: duration, Start: 0,
			Temperature: req.temperature, Text: text, Tokens: tokens,
		}},
	}
}
