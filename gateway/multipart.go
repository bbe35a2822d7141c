package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/triage"
)

// An audio upload's form is read by maitred to route it (its `model`
// field) and by vLLM again: Starlette's form parser over python-multipart,
// where the last `model` field counts. Whatever the two could read
// differently could send the upload to a model the key may not use, so
// formReader reads the form as python-multipart does and accepts only the
// strict subset of multipart/form-data that every parser reads alike;
// anything else is refused (400 invalid_form, or unsupported_media_type
// for the Content-Type), never guessed at:
//   - the body starts with the first delimiter line, "--" boundary CRLF
//     (no preamble, no leading blank lines); a delimiter inside the body
//     is CRLF "--" boundary followed by CRLF or, for the last, "--": a
//     boundary followed by anything else (transport padding included) is
//     refused, since parsers differ on it; bytes after the last delimiter
//     (an epilogue) are ignored, as both ignore them;
//   - a part's header lines end in CRLF (no bare LF or CR), each is
//     `Name: value` with a token name (no folded continuation lines), at
//     most maxPartHeaders of them, none longer than maxPartHeaderLine,
//     and no control character but tab in a value;
//   - exactly one Content-Disposition header, of type form-data, with a
//     name; its parameters are key=value pairs (a token or a quoted
//     string, where the one escape is \"), no key twice in any case, no
//     RFC 2231 extended key (name*=, name*0=: RFC 7578 forbids them,
//     python-multipart ignores them, Go's parser decodes them);
//   - no Content-Transfer-Encoding but 7bit, 8bit or binary (a
//     quoted-printable field is decoded by some parsers, not by vLLM's);
//   - one `model` field, a plain field (no filename);
//   - the request's Content-Type: one header, multipart/form-data, one
//     boundary of RFC 2046's characters (1 to 70), and no charset but
//     UTF-8 (Starlette decodes field names and values with it: in UTF-16
//     other bytes read as `model`).
//
// The forms openai-go writes are in that subset (TestAudioSDK), and so are,
// by how their writers work, those of httpx, undici, the browsers and curl:
// one Content-Disposition with name and filename, a random boundary, no
// preamble, CRLF lines.

// formReader reads a multipart form from br, part by part.
type formReader struct {
	br *bufio.Reader
	// delim is CRLF "--" boundary: what ends a part's body.
	delim []byte
}

const (
	// formBuffer is formReader's read buffer: the longest header line it
	// can hold, and the window in which it looks for the delimiter.
	formBuffer = 64 << 10
	// maxPartHeaders and maxPartHeaderLine bound a part's header
	// section (python-multipart allows 8 lines of 4224 bytes).
	maxPartHeaders    = 32
	maxPartHeaderLine = 16 << 10
)

// errLastPart ends the form: the last delimiter was read.
var errLastPart = errors.New("last part")

// invalidForm is the refusal of a form maitred cannot read as vLLM would.
func invalidForm(param, format string, args ...any) *Error {
	e := badRequest(codeInvalidForm, param, "The multipart form is malformed or ambiguous: "+format, args...)
	// The rest of the body may still be on the connection, unread.
	e.Outcome, e.CloseConn = admission.InvalidForm.String(), true
	return e
}

// formContentType reads the upload's Content-Type headers: one
// multipart/form-data with a valid boundary and no charset but UTF-8. It
// returns the boundary, or the refusal.
func formContentType(cts []string) (string, *Error) {
	refuse := func(format string, args ...any) (string, *Error) {
		return "", &Error{Status: 400, Type: typeInvalidRequest, Code: codeUnsupportedMedia,
			Outcome: admission.UnsupportedMedia.String(), Layer: triage.LayerDoor, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case len(cts) == 0 || cts[0] == "":
		return refuse("Content-Type must be multipart/form-data; the request sent none.")
	case len(cts) > 1:
		return refuse("The request has %d Content-Type headers; send one, multipart/form-data with a boundary.", len(cts))
	}
	ct := cts[0]
	typ, params, problem := headerParams(ct)
	if problem != "" || !strings.EqualFold(typ, "multipart/form-data") || params["boundary"] == "" {
		msg := fmt.Sprintf("Content-Type must be multipart/form-data with a boundary, got %q", ct)
		if problem != "" {
			msg += ": it " + problem
		}
		return refuse("%s.", msg)
	}
	b := params["boundary"]
	if len(b) > 70 || b[len(b)-1] == ' ' || strings.IndexFunc(b, func(r rune) bool { return !isBoundaryChar(r) }) >= 0 {
		return refuse("The multipart boundary %q is not 1 to 70 of RFC 2046's boundary characters.", b)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return refuse("The form's charset is %q; only UTF-8 is accepted (the backend would decode field names and values with it).", cs)
	}
	return b, nil
}

func isBoundaryChar(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("'()+_,-./:=? ", r)
}

// begin reads the first delimiter line; errLastPart for an empty form.
func (f *formReader) begin() error {
	first := f.delim[2:] // "--" boundary
	got, err := f.br.Peek(len(first) + 2)
	if err != nil && err != io.EOF {
		return err
	}
	if !bytes.HasPrefix(got, first) {
		return invalidForm("", "the body does not start with its boundary (a preamble, or another boundary).")
	}
	return f.afterDelimiter(got[len(first):], len(first))
}

// afterDelimiter reads what follows a delimiter (tail: the bytes peeked
// after it, n: the delimiter's length, not yet discarded): CRLF, a part
// follows; "--", the form ends.
func (f *formReader) afterDelimiter(tail []byte, n int) error {
	switch {
	case bytes.HasPrefix(tail, []byte("\r\n")):
		_, err := f.br.Discard(n + 2)
		return err
	case bytes.HasPrefix(tail, []byte("--")):
		_, err := f.br.Discard(n + 2)
		if err != nil {
			return err
		}
		return errLastPart
	case len(tail) < 2:
		return invalidForm("", "the body ends inside a boundary.")
	}
	return invalidForm("", "a boundary is followed by %q, not CRLF or \"--\".", tail[:2])
}

// part is what maitred reads of a part's headers.
type part struct {
	name string
	file bool // it has a filename: vLLM reads it as a file
}

// head reads a part's header section, up to its blank line.
func (f *formReader) head() (part, error) {
	var disp []byte
	for n := 0; ; n++ {
		line, err := f.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return part{}, invalidForm("", "a part's header line is longer than %d bytes.", maxPartHeaderLine)
		}
		if err == io.EOF {
			return part{}, invalidForm("", "the body ends inside a part's headers.")
		}
		if err != nil {
			return part{}, err
		}
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return part{}, invalidForm("", "a part's header line does not end in CRLF.")
		}
		line = line[:len(line)-2]
		if len(line) == 0 {
			break
		}
		if n == maxPartHeaders {
			return part{}, invalidForm("", "a part has more than %d header lines.", maxPartHeaders)
		}
		if len(line) > maxPartHeaderLine {
			return part{}, invalidForm("", "a part's header line is longer than %d bytes.", maxPartHeaderLine)
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return part{}, invalidForm("", "a part's header line is not `Name: value` (a folded or malformed header).")
		}
		value := line[colon+1:]
		if i := bytes.IndexFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }); i >= 0 {
			return part{}, invalidForm("", "a part's header value holds the control character %q.", value[i])
		}
		switch strings.ToLower(string(line[:colon])) {
		case "content-disposition":
			if disp != nil {
				return part{}, invalidForm("", "a part has more than one Content-Disposition header.")
			}
			disp = append([]byte{}, value...)
		case "content-transfer-encoding":
			switch strings.ToLower(string(bytes.Trim(value, " \t"))) {
			case "7bit", "8bit", "binary":
			default:
				return part{}, invalidForm("", "a part's Content-Transfer-Encoding is %q (parsers disagree on decoding it).", bytes.Trim(value, " \t"))
			}
		}
	}
	if disp == nil {
		return part{}, invalidForm("", "a part has no Content-Disposition header.")
	}
	typ, params, problem := headerParams(string(disp))
	if problem != "" {
		return part{}, invalidForm("", "a part's Content-Disposition %s.", problem)
	}
	if !strings.EqualFold(typ, "form-data") {
		return part{}, invalidForm("", "a part's Content-Disposition is %q, not form-data.", typ)
	}
	name, ok := params["name"]
	if !ok {
		return part{}, invalidForm("", "a part's Content-Disposition has no name.")
	}
	_, file := params["filename"]
	return part{name: name, file: file}, nil
}

// body copies the current part's body to w, up to its delimiter, and
// reads the delimiter: errLastPart after the last one.
func (f *formReader) body(w io.Writer) error {
	for {
		buf, err := f.br.Peek(formBuffer)
		if i := bytes.Index(buf, f.delim); i >= 0 {
			if _, werr := w.Write(buf[:i]); werr != nil {
				return werr
			}
			if _, derr := f.br.Discard(i); derr != nil {
				return derr
			}
			tail, perr := f.br.Peek(len(f.delim) + 2)
			if perr != nil && perr != io.EOF {
				return perr
			}
			return f.afterDelimiter(tail[len(f.delim):], len(f.delim))
		}
		if err == io.EOF {
			return invalidForm("", "the body ends inside a part (no closing boundary).")
		}
		if err != nil && err != bufio.ErrBufferFull {
			return err
		}
		// No delimiter in the window: its end may hold the delimiter's
		// start.
		n := len(buf) - (len(f.delim) - 1)
		if _, werr := w.Write(buf[:n]); werr != nil {
			return werr
		}
		if _, derr := f.br.Discard(n); derr != nil {
			return derr
		}
	}
}

// headerParams parses a header value `type *(";" key "=" value)` strictly:
// optional spaces and tabs around each token, a value a token or a quoted
// string whose one escape is \" (python-multipart and Go's mime unescape
// other escapes differently, and python-multipart's splitting at ';'
// miscounts an escaped backslash), keys lowercased and never repeated, no
// RFC 2231 extended key, no control character. problem, when not empty,
// says what is wrong.
func headerParams(v string) (typ string, params map[string]string, problem string) {
	if i := strings.IndexFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }); i >= 0 {
		return "", nil, fmt.Sprintf("holds the control character %q", v[i])
	}
	s := strings.Trim(v, " \t")
	end := strings.IndexByte(s, ';')
	if end < 0 {
		end = len(s)
	}
	typ, s = strings.TrimRight(s[:end], " \t"), s[end:]
	if typ == "" || !isToken([]byte(strings.ReplaceAll(typ, "/", ""))) {
		return "", nil, fmt.Sprintf("has a malformed type %q", typ)
	}
	params = map[string]string{}
	for s != "" {
		s = strings.TrimLeft(s, " \t")
		if s == "" || s[0] != ';' {
			return "", nil, "has text after a parameter's value"
		}
		s = strings.TrimLeft(s[1:], " \t")
		k := tokenPrefix(s)
		if k == "" {
			return "", nil, "has a parameter without a name"
		}
		if strings.ContainsRune(k, '*') {
			return "", nil, fmt.Sprintf("has the RFC 2231 parameter %q (not accepted in a form)", k)
		}
		key := strings.ToLower(k)
		s = strings.TrimLeft(s[len(k):], " \t")
		if s == "" || s[0] != '=' {
			return "", nil, fmt.Sprintf("has the parameter %q without a value", k)
		}
		s = strings.TrimLeft(s[1:], " \t")
		var val string
		if s != "" && s[0] == '"' {
			var b strings.Builder
			i := 1
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					if i+1 == len(s) || s[i+1] != '"' {
						return "", nil, fmt.Sprintf("has a backslash in parameter %q that escapes no quote", k)
					}
					i++
				}
				b.WriteByte(s[i])
			}
			if i == len(s) {
				return "", nil, fmt.Sprintf("has an unterminated quoted value in parameter %q", k)
			}
			val, s = b.String(), s[i+1:]
		} else {
			val = tokenPrefix(s)
			if val == "" {
				return "", nil, fmt.Sprintf("has an empty or malformed value in parameter %q", k)
			}
			s = s[len(val):]
		}
		if _, dup := params[key]; dup {
			return "", nil, fmt.Sprintf("repeats the parameter %q", key)
		}
		params[key] = val
	}
	return typ, params, ""
}

// tokenPrefix is the longest prefix of s made of token characters.
func tokenPrefix(s string) string {
	for i := 0; i < len(s); i++ {
		if !isTokenByte(s[i]) {
			return s[:i]
		}
	}
	return s
}

func isToken(b []byte) bool {
	for _, c := range b {
		if !isTokenByte(c) {
			return false
		}
	}
	return len(b) > 0
}

// isTokenByte: RFC 9110's tchar.
func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
