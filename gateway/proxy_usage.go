package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"

	"github.com/maitred-dev/maitred/tokenize"
)

// Bounds of what a usageMeter holds: whatever the answer's size, a meter
// keeps at most one SSE event's data, the not-yet-counted streamed text
// and a usage object.
const (
	maxUsageEvent = 64 << 10 // an event's data; a larger one is skipped
	maxUsageText  = 16 << 10 // streamed text counted in pieces this large
	maxUsageValue = 4 << 10  // a non-streamed answer's "usage" value
	maxModelValue = 258      // the answer's "model": a string of 256 bytes, quoted
)

// usageMeter follows one attempt's answer on its way to the client (it is
// the response body the proxy reads, wrapping the stream or body guard)
// and tells, when the request ends, how many tokens it used: prompt +
// completion, for the key's quota.
//
//   - A non-streamed JSON answer: its top-level "usage" member, found by a
//     scanner that holds nothing else (chat and completions
//     prompt_tokens + completion_tokens; pooling prompt_tokens; Responses
//     and Anthropic input_tokens + output_tokens; total_tokens alone when
//     that is all there is).
//   - A stream: the usage its events report (OpenAI's include_usage chunk,
//     cumulative with continuous_usage_stats; Responses' response.completed;
//     Anthropic's message_start and message_delta), each part that is
//     missing taken elsewhere: the completion counted from the streamed
//     text deltas with the model's tokenizer, the prompt from the door's
//     count. A stream cut short (the client left, the backend broke) is
//     charged for what was streamed before the cut.
//
// The family's streamShape.meter reads its events: those of the shapes
// vLLM sends in one pass without allocating (eventParser), any other by
// encoding/json into the family's struct, the reference the fast read
// is tested against (gateway/doc.go says which). In the same pass the
// meter of a traced request keeps the answer's model (its first "model":
// a non-streamed answer's top-level member, a stream's first chunk or
// message), at most maxModelValue bytes. parts tells the same usage split
// into prompt and completion, each reported or counted, for the trace's
// GenAI attributes: one reader of the answer's usage serves the quota,
// the access log and the trace. On a Responses create it also hands the
// answer's id (top-level "id"; a stream's response.created) to the
// recorder of its owner (onID), before those bytes go to the client. The meter is a value in its attempt,
// owned by the request's goroutine, like the rest of it.
type usageMeter struct {
	body   io.ReadCloser
	status int
	// events reads a stream's events (the family's streamShape.meter); nil:
	// not a stream.
	events func(m *usageMeter, data []byte)
	tok    tokenize.Encoder // nil: streamed text cannot be counted
	// prompt is the door's count, when it counted (promptKnown).
	prompt      int64
	promptKnown bool

	scan usageScanner // a non-streamed answer

	// A stream: the event being read, the text not yet counted, what was
	// counted, and what the events reported.
	line                 []byte
	lineLost             bool
	data                 []byte
	text                 []byte
	counted              int64
	reported             usageReport
	reportedP, reportedC bool
	// evUsage and evNumbers are the usage of the last event read fast
	// that carried one, as report takes it (reportRead).
	evUsage   usageValues
	evNumbers usageNumbers
	// model is the answer's model, once an event named it. noModel: it
	// is not kept (only a traced request's spans name it), so an untraced
	// request pays nothing for it.
	model   string
	noModel bool
	// onID, on a Responses create, hears the id the answer names (a
	// JSON answer's top-level "id", a stream's response.created), once,
	// before those bytes go on to the client.
	onID   func(id string)
	idSent bool
}

type usageReport struct{ prompt, completion int64 }

// follow starts the meter on an answer whose headers came: status, and
// whether it is the family's SSE stream. It becomes the response body.
func (m *usageMeter) follow(x *exchange, status int, body io.ReadCloser, stream bool) io.ReadCloser {
	m.body, m.status = body, status
	m.noModel = !x.tr.on()
	m.scan.modelDone = m.noModel // as if read: the scanner skips it
	m.onID = x.onResponseID
	m.scan.idDone = m.onID == nil
	if stream {
		m.events = x.streamShape().meter
	}
	if x.rt != nil && x.rt.tok != nil {
		m.tok = x.rt.tok.Encoder()
	}
	if x.uncounted == "" && x.promptTokens > 0 {
		m.prompt, m.promptKnown = int64(x.promptTokens), true
	}
	return m
}

func (m *usageMeter) Read(p []byte) (int, error) {
	n, err := m.body.Read(p)
	if n > 0 && m.status < 300 {
		if m.events != nil {
			m.observeStream(p[:n])
		} else {
			m.scan.feed(p[:n])
			if m.onID != nil && m.scan.idDone && !m.idSent {
				m.idSent = true
				if id := modelValue(m.scan.id); id != "" {
					m.onID(id)
				}
			}
		}
	}
	return n, err
}

func (m *usageMeter) Close() error { return m.body.Close() }

// awaitData is its body's (a stream's guard), when it has one: the
// meter only reads what a Read returns.
func (m *usageMeter) awaitData() bool {
	a, ok := m.body.(dataAwaiter)
	return ok && a.awaitData()
}

// Used reports the tokens the answer used, prompt + completion, and
// whether that is known. An answer refused by the backend (4xx) used
// none; one that failed (5xx), or a non-streamed answer without a usage
// member, is unknown (the caller keeps what it reserved). A stream is
// known when its prompt is (reported or counted by the door) and its
// completion is (reported, or counted from its text with a tokenizer).
func (m *usageMeter) Used() (tokens int64, known bool) {
	switch {
	case m.status == 0:
		return 0, false
	case m.status >= 400 && m.status < 500:
		return 0, true
	case m.status >= 300:
		return 0, false
	case m.events == nil:
		return m.scan.used()
	}
	p := m.parts()
	if p.promptFrom == usageUnknown || p.completionFrom == usageUnknown {
		return 0, false
	}
	return p.prompt + p.completion, true
}

// usageFrom says where a part of the usage came from.
type usageFrom uint8

const (
	usageUnknown  usageFrom = iota
	usageReported           // the backend's answer said it
	usageCounted            // the gateway counted it (the door's prompt count; the streamed text)
)

// usageParts is an answer's usage split into its prompt and completion,
// each with where it came from, and the model the answer named ("": none).
type usageParts struct {
	prompt, completion         int64
	promptFrom, completionFrom usageFrom
	model                      string
}

// parts is the answer's usage in parts, for a successful answer (2xx);
// a refused or failed answer, or none, has no parts. The prompt is the
// reported one, else the door's count; the completion the reported one,
// else (a stream) its text counted with the model's tokenizer. A
// non-streamed answer's text is not kept, so its completion is known
// only when reported.
func (m *usageMeter) parts() usageParts {
	if m.status < 200 || m.status >= 300 {
		return usageParts{}
	}
	var p usageParts
	var rep usageReport
	repP, repC := m.reportedP, m.reportedC
	if m.events == nil {
		p.model = m.scan.modelName()
		if u, ok := m.scan.numbers(); ok {
			rep.prompt, repP = u.prompt()
			rep.completion, repC = u.completion()
		}
	} else {
		p.model, rep = m.model, m.reported
	}
	switch {
	case repP:
		p.prompt, p.promptFrom = rep.prompt, usageReported
	case m.promptKnown:
		p.prompt, p.promptFrom = m.prompt, usageCounted
	}
	switch {
	case repC:
		p.completion, p.completionFrom = rep.completion, usageReported
	case m.events != nil && m.tok != nil:
		m.countText(len(m.text))
		p.completion, p.completionFrom = m.counted, usageCounted
	}
	return p
}

// from says where Used's figure came from: "usage" when the backend
// reported all of it, "counted" when the gateway counted a part.
// "" when no answer was read (or the backend refused or failed).
func (m *usageMeter) from() string {
	switch {
	case m.status == 0 || m.status >= 300:
		return ""
	case m.events == nil || (m.reportedP && m.reportedC):
		return "usage"
	}
	return "counted"
}

// observeStream splits the bytes the client is sent into SSE lines and
// hands each event's data to the family's reader.
func (m *usageMeter) observeStream(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			m.addLine(p)
			return
		}
		m.addLine(p[:i])
		p = p[i+1:]
		line := bytes.TrimSuffix(m.line, []byte{'\r'})
		switch {
		case m.lineLost: // a line too long to be a usage event: its text goes uncounted
		case len(line) == 0:
			if len(m.data) > 0 {
				m.events(m, m.data)
			}
			m.data = m.data[:0]
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte{' '})
			if len(m.data) > 0 {
				m.data = append(m.data, '\n')
			}
			m.data = append(m.data, v...)
		}
		m.line, m.lineLost = m.line[:0], false
	}
}

func (m *usageMeter) addLine(p []byte) {
	if m.lineLost || len(m.line)+len(p) > maxUsageEvent {
		m.line, m.lineLost = m.line[:0], true
		return
	}
	m.line = append(m.line, p...)
}

// streamed adds completion text the client was sent.
func (m *usageMeter) streamed(s string) {
	if s == "" {
		return
	}
	m.text = append(m.text, s...)
	m.textAdded()
}

// streamedJSON adds a chunk's text t (a JSON string in data) as
// streamed does its decoded value.
func (m *usageMeter) streamedJSON(data []byte, t chunkText) {
	if t.start == t.end {
		return
	}
	if t.plain {
		m.text = append(m.text, data[t.start:t.end]...)
	} else {
		m.text = appendUnquoted(m.text, data[t.start:t.end])
	}
	m.textAdded()
}

// textAdded counts the text in hand once it is maxUsageText long.
func (m *usageMeter) textAdded() {
	if len(m.text) >= maxUsageText && m.tok != nil {
		// Count all but the last word, so that pieces split where the
		// tokenizer would split anyway.
		cut := bytes.LastIndexByte(m.text, ' ')
		if cut <= 0 {
			cut = len(m.text)
		}
		m.countText(cut)
	} else if len(m.text) >= maxUsageText {
		m.text = m.text[:0] // nothing can count it (Used: unknown)
	}
}

func (m *usageMeter) countText(n int) {
	if n == 0 || m.tok == nil {
		return
	}
	c, _ := m.tok.Count(string(m.text[:n]), false, 0)
	m.counted += int64(c)
	m.text = m.text[:copy(m.text, m.text[n:])]
}

// report takes the usage an event reported; counts in a stream are
// cumulative, so the last report stands.
func (m *usageMeter) report(u *usageNumbers, prompt, completion bool) {
	if u == nil {
		return
	}
	if p, ok := u.prompt(); ok && prompt {
		m.reported.prompt, m.reportedP = p, true
	}
	if c, ok := u.completion(); ok && completion {
		m.reported.completion, m.reportedC = c, true
	}
}

// usageNumbers is a usage object of any family.
type usageNumbers struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	InputTokens      *int64 `json:"input_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
	TotalTokens      *int64 `json:"total_tokens"`
}

func (u *usageNumbers) prompt() (int64, bool) {
	switch {
	case u.PromptTokens != nil:
		return *u.PromptTokens, true
	case u.InputTokens != nil:
		return *u.InputTokens, true
	}
	return 0, false
}

func (u *usageNumbers) completion() (int64, bool) {
	switch {
	case u.CompletionTokens != nil:
		return *u.CompletionTokens, true
	case u.OutputTokens != nil:
		return *u.OutputTokens, true
	}
	return 0, false
}

// total is prompt + completion, or total_tokens when that is all there is
// (a pooling answer that reports no parts).
func (u *usageNumbers) total() (int64, bool) {
	p, okP := u.prompt()
	c, okC := u.completion()
	switch {
	case okP || okC:
		return p + c, true
	case u.TotalTokens != nil:
		return *u.TotalTokens, true
	}
	return 0, false
}

// meterOpenAIEvent reads a chat, completions or audio stream chunk: the
// choices' text (content, reasoning, tool-call arguments; a completion's
// text) and the usage, when the chunk carries it. The chunk is read
// without allocating (decodeOpenAIChunk) when it has the shape vLLM
// sends, else by encoding/json (meterOpenAIEventJSON); either way alike.
func meterOpenAIEvent(m *usageMeter, data []byte) {
	if bytes.Equal(data, doneData) {
		return
	}
	var e meteredEvent
	if !decodeOpenAIChunk(data, &e) {
		meterOpenAIEventJSON(m, data)
		return
	}
	m.eventModel(data, e.model)
	for _, t := range e.texts[:e.n] {
		m.streamedJSON(data, t)
	}
	m.reportRead(&e.usage, true, true)
}

// eventModel takes the model at s in an event read fast, as the
// family's struct does its "model" member (eventModel).
func (m *usageMeter) eventModel(data []byte, s span) {
	if s.end > 0 {
		eventModel{m}.UnmarshalJSON(data[s.start:s.end])
	}
}

// reportRead takes the usage an event read fast reported, as report
// takes the one encoding/json reads: the numbers go through a
// usageNumbers the meter owns (evNumbers, pointing into evUsage), so that
// an event that carries usage (every chunk, with continuous_usage_stats)
// allocates nothing.
func (m *usageMeter) reportRead(v *usageValues, prompt, completion bool) {
	if v.set == 0 {
		return // absent, null or empty: report would take nothing
	}
	m.evUsage = *v
	m.evUsage.numbers(&m.evNumbers)
	m.report(&m.evNumbers, prompt, completion)
}

// meterOpenAIEventJSON is meterOpenAIEvent by encoding/json: a chunk of
// any other shape, or not a chunk.
func meterOpenAIEventJSON(m *usageMeter, data []byte) {
	var ev struct {
		Choices []struct {
			Text  string `json:"text"`
			Delta struct {
				Content          string `json:"content"`
				ReasoningContent string `json:"reasoning_content"`
				Reasoning        string `json:"reasoning"`
				ToolCalls        []struct {
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *usageNumbers `json:"usage"`
		Model eventModel    `json:"model"`
	}
	ev.Model.m = m
	if json.Unmarshal(data, &ev) != nil {
		return // not a chunk (the gateway's own error event)
	}
	for _, c := range ev.Choices {
		m.streamed(c.Text)
		m.streamed(c.Delta.Content)
		m.streamed(c.Delta.ReasoningContent)
		m.streamed(c.Delta.Reasoning)
		for _, tc := range c.Delta.ToolCalls {
			m.streamed(tc.Function.Name)
			m.streamed(tc.Function.Arguments)
		}
	}
	m.report(ev.Usage, true, true)
}

// meterResponsesEvent reads a Responses stream event: the text of its
// *.delta events, and the usage of the final response
// (response.completed, .incomplete, .failed). The event is read without
// allocating (decodeResponsesEvent) when it has the shape vLLM sends,
// else by encoding/json (meterResponsesEventJSON); either way alike.
func meterResponsesEvent(m *usageMeter, data []byte) {
	var e meteredEvent
	if !decodeResponsesEvent(data, &e) {
		meterResponsesEventJSON(m, data)
		return
	}
	m.eventModel(data, e.model)
	if e.typeIs(data, "response.created") && m.onID != nil && !m.idSent {
		m.idSent = true
		if id := modelValue(data[e.id.start:e.id.end]); id != "" {
			m.onID(id)
		}
	}
	if bytes.HasSuffix(data[e.typ.start:e.typ.end], []byte(".delta")) {
		m.streamedJSON(data, e.texts[0])
	}
	m.reportRead(&e.usage, true, true)
}

// meterResponsesEventJSON is meterResponsesEvent by encoding/json: an
// event of any other shape, or not an event.
func meterResponsesEventJSON(m *usageMeter, data []byte) {
	var ev struct {
		Type     string          `json:"type"`
		Delta    json.RawMessage `json:"delta"`
		Response struct {
			ID    json.RawMessage `json:"id"`
			Usage *usageNumbers   `json:"usage"`
			Model eventModel      `json:"model"`
		} `json:"response"`
	}
	ev.Response.Model.m = m
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if ev.Type == "response.created" && m.onID != nil && !m.idSent {
		m.idSent = true
		if id := modelValue(ev.Response.ID); id != "" {
			m.onID(id)
		}
	}
	if strings.HasSuffix(ev.Type, ".delta") {
		var s string
		if json.Unmarshal(ev.Delta, &s) == nil {
			m.streamed(s)
		}
	}
	m.report(ev.Response.Usage, true, true)
}

// meterAnthropicEvent reads a Messages stream event: message_start's
// input tokens, the content deltas (text, tool input, thinking) and
// message_delta's cumulative usage. The event is read without allocating
// (decodeAnthropicEvent) when it has the shape vLLM sends, else by
// encoding/json (meterAnthropicEventJSON); either way alike.
func meterAnthropicEvent(m *usageMeter, data []byte) {
	var e meteredEvent
	if !decodeAnthropicEvent(data, &e) {
		meterAnthropicEventJSON(m, data)
		return
	}
	m.eventModel(data, e.model)
	switch {
	case e.typeIs(data, "message_start"):
		m.reportRead(&e.startUsage, true, false) // its output_tokens is not the answer's
	case e.typeIs(data, "content_block_delta"):
		for _, t := range e.texts[:3] {
			m.streamedJSON(data, t)
		}
	case e.typeIs(data, "message_delta"):
		m.reportRead(&e.usage, true, true)
	}
}

// meterAnthropicEventJSON is meterAnthropicEvent by encoding/json: an
// event of any other shape, or not an event.
func meterAnthropicEventJSON(m *usageMeter, data []byte) {
	var ev struct {
		Type    string `json:"type"`
		Message struct {
			Usage *usageNumbers `json:"usage"`
			Model eventModel    `json:"model"`
		} `json:"message"`
		Delta *struct {
			Text        string `json:"text"`
			PartialJSON string `json:"partial_json"`
			Thinking    string `json:"thinking"`
		} `json:"delta"`
		Usage *usageNumbers `json:"usage"`
	}
	ev.Message.Model.m = m
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		m.report(ev.Message.Usage, true, false) // its output_tokens is not the answer's
	case "content_block_delta":
		if d := ev.Delta; d != nil {
			m.streamed(d.Text)
			m.streamed(d.PartialJSON)
			m.streamed(d.Thinking)
		}
	case "message_delta":
		m.report(ev.Usage, true, true)
	}
}

// eventModel is an event's "model": the first one an answer's events
// name is the meter's; the later ones (every OpenAI chunk repeats it) are
// not even copied.
type eventModel struct{ m *usageMeter }

func (e eventModel) UnmarshalJSON(b []byte) error {
	if e.m != nil && !e.m.noModel && e.m.model == "" {
		e.m.model = modelValue(b)
	}
	return nil
}

// modelValue is a JSON value that names a model: a string of at most
// maxModelValue bytes (quoted); "" for anything else.
func modelValue(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) < 3 || len(b) > maxModelValue || b[0] != '"' || b[len(b)-1] != '"' {
		return ""
	}
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b[1 : len(b)-1])
	}
	var s string
	if json.Unmarshal(b, &s) != nil {
		return ""
	}
	return s
}

// usageScanner finds the top-level "usage" and "model" members of a JSON
// answer (and "id", when asked: idDone false) as it passes, holding nothing
// but their values (at most maxUsageValue, maxModelValue, maxModelValue): the rest of the answer (choices,
// embeddings, prompt logprobs, before or after them) goes by. It follows
// strings, escapes and nesting, so a "usage" inside a choice or a string
// is not taken.
type usageScanner struct {
	depth      int
	inStr, esc bool
	expectKey  bool // at depth 1: the next string is a member name
	readingKey bool
	key        [len("usage")]byte
	keyLen     int  // bytes of the member name read; -1: neither name
	afterKey   byte // the member whose name was just read: 'u'sage, 'm'odel, 'i'd, 0
	capturing  byte // the member whose value is being read
	val        []byte
	model      []byte
	id         []byte
	usageDone  bool // the usage member was read (over: it was too large)
	over       bool
	modelDone  bool
	idDone     bool // the id was read, or is not wanted (only a Responses create's is)
	done       bool // all read: the rest goes by unread
	parsed     bool // numbers has parsed val into u
	u          usageNumbers
	vals       usageValues // u's numbers, when read fast
	uOK        bool
}

// captureString adds c to a string value being captured (the answer's
// model or id), or, past maxModelValue bytes, gives that value up as read
// and empty; it says whether the scanner then has all it wants.
func (s *usageScanner) captureString(buf *[]byte, read *bool, c byte) (allDone bool) {
	if len(*buf) < maxModelValue {
		*buf = append(*buf, c)
		return false
	}
	s.capturing, *read, *buf = 0, true, (*buf)[:0]
	s.done = s.usageDone && s.modelDone && s.idDone
	return s.done
}

// feed scans the next bytes of the answer.
func (s *usageScanner) feed(p []byte) {
	if s.done {
		return
	}
	for _, c := range p {
		if s.capturing != 0 && s.capture(c) {
			return
		}
		if s.inStr {
			s.stringByte(c)
			continue
		}
		if s.structural(c) {
			continue // the ':' that starts a captured value is not its
		}
		if s.capturing != 0 && (s.depth == 0 || (s.depth == 1 && c == ',')) && s.endCapture() {
			return
		}
	}
}

// capture adds c to the value being captured; it says whether the
// scanner then has all it wants.
func (s *usageScanner) capture(c byte) (allDone bool) {
	switch s.capturing {
	case 'u':
		if len(s.val) == maxUsageValue {
			s.capturing, s.usageDone, s.over = 0, true, true
			s.done = s.modelDone && s.idDone
			return s.done
		}
		s.val = append(s.val, c)
	case 'm':
		return s.captureString(&s.model, &s.modelDone, c)
	case 'i':
		return s.captureString(&s.id, &s.idDone, c)
	}
	return false
}

// stringByte follows a byte inside a JSON string: escapes, its end, and
// a top-level member's name, which says whether its value is one to
// capture (afterKey).
func (s *usageScanner) stringByte(c byte) {
	switch {
	case s.esc:
		s.esc = false
		if s.readingKey {
			s.keyLen = -1
		}
	case c == '\\':
		s.esc = true
	case c == '"':
		s.inStr = false
		if s.readingKey {
			s.readingKey, s.afterKey = false, 0
			switch {
			case s.keyLen == 2 && string(s.key[:2]) == "id" && !s.idDone:
				s.afterKey = 'i'
			case s.keyLen != len(s.key):
			case string(s.key[:]) == "usage" && !s.usageDone:
				s.afterKey = 'u'
			case string(s.key[:]) == "model" && !s.modelDone:
				s.afterKey = 'm'
			}
		}
	case s.readingKey:
		if s.keyLen >= 0 && s.keyLen < len(s.key) {
			s.key[s.keyLen] = c
			s.keyLen++
		} else {
			s.keyLen = -1
		}
	}
}

// structural follows a byte outside strings: nesting, member names and
// separators. It says whether c started a captured value (and is not
// part of it).
func (s *usageScanner) structural(c byte) (startsValue bool) {
	switch c {
	case '"':
		s.inStr = true
		if s.depth == 1 && s.expectKey {
			s.readingKey, s.keyLen, s.expectKey = true, 0, false
		}
	case '{', '[':
		s.depth++
		if s.depth == 1 && c == '{' {
			s.expectKey = true
		}
	case '}', ']':
		s.depth--
	case ':':
		if s.depth == 1 && s.afterKey != 0 && s.capturing == 0 {
			s.capturing, s.afterKey = s.afterKey, 0
			return true
		}
	case ',':
		if s.depth == 1 {
			s.expectKey = true
		}
	}
	return false
}

// endCapture ends the captured member at the byte that ended it (not the
// value's: it is dropped); it says whether the scanner has all it wants.
func (s *usageScanner) endCapture() (allDone bool) {
	switch s.capturing {
	case 'u':
		s.val = s.val[:len(s.val)-1]
		s.usageDone = true
	case 'm':
		s.model = s.model[:len(s.model)-1]
		s.modelDone = true
	default:
		s.id = s.id[:len(s.id)-1]
		s.idDone = true
	}
	s.capturing = 0
	if s.usageDone && s.modelDone && s.idDone {
		s.done = true
	}
	return s.done
}

// numbers is the usage member read, parsed once.
func (s *usageScanner) numbers() (*usageNumbers, bool) {
	if !s.parsed {
		s.parsed = true
		s.uOK = s.usageDone && !s.over && decodeUsage(s.val, &s.u, &s.vals)
	}
	return &s.u, s.uOK
}

func (s *usageScanner) used() (int64, bool) {
	u, ok := s.numbers()
	if !ok {
		return 0, false
	}
	return u.total()
}

// modelName is the answer's top-level "model", "" when it had none (or
// not a string, or a longer one than maxModelValue).
func (s *usageScanner) modelName() string {
	if !s.modelDone {
		return ""
	}
	return modelValue(s.model)
}

// used is the tokens the request used at a backend (prompt + completion)
// and whether that is known, for the key's quota at the request's end: a
// request that never reached a backend (refused at the door or the queue,
// or every try failed to connect) used none; one that reached a backend
// is its last attempt's answer (usageMeter.Used), unknown when no answer
// came (the backend may have worked on it).
func (x *exchange) used() (tokens int64, known bool) {
	a := x.att
	switch {
	case a == nil:
		return 0, true
	case a.upstreamStatus == 0 && a.res.cause != nil && a.res.neverSent:
		return 0, true
	}
	return a.usage.Used()
}
