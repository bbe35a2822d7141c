package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/triage"
)

// The audio APIs (POST /v1/audio/transcriptions and /v1/audio/translations)
// take a multipart/form-data upload with `model` a form field. An upload is
// read whole before it takes a backend slot, as nginx buffers a body before
// it takes an upstream: a client that sends its model field and then drips
// holds its own connection and spool, never one of the model's backends.
//
// readUpload copies every byte it reads, unchanged, to a temporary file (the
// spool, on disk, unlinked at once) while it reads the form strictly, part
// by part to the last (formReader, multipart.go): every part's headers are
// read, so a second `model` field anywhere, or a part vLLM's parser could
// read as `model` where maitred would not, is refused (400 invalid_form)
// before any backend. It keeps `model` and the small fields the door reads
// (admission.FormFields; the last of each counts, as in Starlette's form)
// for the door's CheckForm. The upload must be complete within
// max_audio_body_bytes (plus formAllowance; 413), read_audio_body_timeout
// (from its headers to its last byte; 408) and the gateway's body budget
// (max_body_bytes_in_flight: the spool's bytes count as they arrive, until
// the request ends; 503 server_busy). The backend then receives the spool,
// the client's own bytes, never re-encoded, with their length; a backend
// that could not be connected to is retried on another, the spool read
// again.
//
// Memory: a formBuffer read buffer and the fields read. Disk: a spool
// holds at most max_audio_body_bytes + formAllowance and lives as long as
// its request, queue wait included.

// formAllowance is what an upload's body may carry beyond
// max_audio_body_bytes: the limit is the audio's (OpenAI's and vLLM's 25
// MiB are the file's), and the form's boundaries, part headers and other
// fields come on top. A file vLLM accepts is never refused here.
const formAllowance = 1 << 20

// maxFormValue bounds a form field the gateway reads (`model`, stream,
// max_completion_tokens).
const maxFormValue = 1 << 10

// spoolStep is how much of the body budget a spool reserves at a time.
const spoolStep = 64 << 10

// upload is an audio request's body, read whole into its spool.
type upload struct {
	form    admission.Form
	spool   *os.File
	removed bool // the spool's name is already unlinked
	spooled int64
	limit   int64
	timeout time.Duration
}

// readUpload is the audio APIs' bodyReader: it returns no bytes and hands
// the pipeline the spooled body in x.upload; the door checks its form
// (admission.Door.CheckForm).
func readUpload(g *Gateway, w http.ResponseWriter, r *http.Request, x *exchange) ([]byte, error) {
	limit, timeout := g.conf().MaxAudioBodyBytes+formAllowance, g.conf().ReadAudioBodyTimeout.D()
	boundary, e := formContentType(r.Header.Values("Content-Type"))
	if e != nil {
		return nil, g.rejected(x, e)
	}
	if r.ContentLength > limit {
		return nil, g.rejected(x, uploadTooLarge(limit))
	}
	up := &upload{limit: limit, timeout: timeout}
	if timeout > 0 {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
			// Cleared once the body is in: a read deadline left behind
			// would cut the server's watch for the client leaving.
			defer rc.SetReadDeadline(time.Time{})
		}
	}
	var err error
	if up.spool, err = os.CreateTemp("", "maitred-audio-*"); err != nil {
		return nil, &Error{Status: http.StatusInternalServerError, Type: typeServer, Code: codeInternal, Layer: triage.LayerDoor,
			Message: "The gateway could not spool the upload.", Cause: err}
	}
	// Unlinked at once where the system allows it (the open file stays
	// readable): a spool never outlives its request, even if the process
	// dies; close removes it otherwise.
	up.removed = os.Remove(up.spool.Name()) == nil
	x.upload = up
	// The request's size is what was spooled, read whole or not (a failed
	// upload logs what came).
	defer func() { x.bytesIn = int(up.spooled) }()
	var held int64 // the body budget the spool reserved (x.bodyHeld's share)
	spool := writerFunc(func(p []byte) (int, error) {
		if need := up.spooled + int64(len(p)) - held; need > 0 {
			step := max(need, spoolStep)
			if !g.bodies.take(step) {
				return 0, bodiesFull()
			}
			held += step
			x.bodyHeld += step
		}
		n, err := up.spool.Write(p)
		up.spooled += int64(n)
		return n, err
	})
	if err := up.read(io.TeeReader(http.MaxBytesReader(w, r.Body, limit), spool), boundary); err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			if e.Outcome != "" { // a form refused: counted as the door's rejections are
				return nil, g.rejected(x, e)
			}
			return nil, e
		}
		return nil, g.uploadError(x, r, err)
	}
	return nil, nil
}

// read reads the form to its end and then the body's (an epilogue),
// every byte spooled by the tee in body, keeping the fields the door
// reads.
func (up *upload) read(body io.Reader, boundary string) error {
	f := &formReader{br: bufio.NewReaderSize(body, formBuffer), delim: []byte("\r\n--" + boundary)}
	err := f.begin()
	for err == nil {
		var p part
		if p, err = f.head(); err == nil {
			err = up.field(f, p)
		}
	}
	if err != errLastPart {
		return err
	}
	// What follows the last boundary is ignored by every parser, and
	// spooled: the backend receives the client's bytes.
	if _, err := io.Copy(io.Discard, body); err != nil {
		return err
	}
	_, err = up.spool.Seek(0, io.SeekStart)
	return err
}

// field reads part p's body: `model` and the door's other fields are
// kept; any other part, a file included, only passes through the spool.
func (up *upload) field(f *formReader, p part) error {
	if p.name == "model" {
		if p.file {
			return invalidForm("model", "the `model` part is a file (it has a filename); send it as a plain field.")
		}
		if up.form.HasModel {
			return invalidForm("model", "the form has more than one `model` field.")
		}
	} else if p.file || !slices.Contains(admission.FormFields, p.name) {
		return f.body(io.Discard)
	}
	v := &fieldValue{}
	err := f.body(v)
	if v.over {
		return invalidForm(p.name, "the form field %q is longer than %d bytes.", p.name, maxFormValue)
	}
	if err != nil && err != errLastPart {
		return err
	}
	if p.name == "model" {
		up.form.Model, up.form.HasModel = string(v.b), true
		return err
	}
	if up.form.Fields == nil {
		up.form.Fields = map[string]string{}
	}
	up.form.Fields[p.name] = string(v.b) // the last one counts, as in Starlette's form
	return err
}

// fieldValue collects a field's value, up to maxFormValue bytes.
type fieldValue struct {
	b    []byte
	over bool
}

var errFieldTooLong = errors.New("form field too long")

func (v *fieldValue) Write(p []byte) (int, error) {
	if len(v.b)+len(p) > maxFormValue {
		v.over = true
		return 0, errFieldTooLong
	}
	v.b = append(v.b, p...)
	return len(p), nil
}

// attach returns the upstream body, the spool; with how to read it again
// and its length.
func (up *upload) attach() (io.ReadCloser, func() (io.ReadCloser, error), int64) {
	open := func() (io.ReadCloser, error) { return io.NopCloser(io.NewSectionReader(up.spool, 0, up.spooled)), nil }
	body, _ := open()
	return body, open, up.spooled
}

// close removes the spool; the conclusion calls it as the request ends.
func (up *upload) close() {
	if up == nil {
		return
	}
	_ = up.spool.Close()
	if !up.removed {
		_ = os.Remove(up.spool.Name())
	}
}

// uploadError is the answer when the client's body could not be read:
// over the limit, too slow, gone.
func (g *Gateway) uploadError(x *exchange, r *http.Request, err error) error {
	e := bodyReadError(r, err, x.upload.limit, x.upload.timeout)
	if e, ok := e.(*Error); ok {
		switch e.Code {
		case codeRequestTooLarge:
			return g.rejected(x, uploadTooLarge(x.upload.limit))
		case codeRequestTimeout:
			e.Message = fmt.Sprintf("The audio upload did not arrive within %s (read_audio_body_timeout).", x.upload.timeout)
		}
	}
	return e
}

func uploadTooLarge(limit int64) *Error {
	e := tooLarge(limit)
	e.Message = fmt.Sprintf("The audio upload exceeds the gateway's limit of %d bytes (max_audio_body_bytes, %d, plus %d for the form's other parts).",
		limit, limit-formAllowance, formAllowance)
	return e
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
