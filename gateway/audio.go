package gateway

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/triage"
)

// The audio APIs (POST /v1/audio/transcriptions and /v1/audio/translations)
// take a multipart/form-data upload with `model` a form field. The upload
// streams through to the backend and is never held in memory, under its
// own limit (max_audio_body_bytes) and read timeout
// (read_audio_body_timeout).
//
// The model decides the backend, and a client may send `model` after the
// audio: openai-go writes the parts in the lexical order of their names,
// `file` before `model`. So readUpload parses the multipart stream as it
// arrives and copies every byte it reads, unchanged, to a temporary file
// (the spool, on disk), until it has seen `model` and the small fields
// after it, up to the next file part or the end of the body. The backend
// then receives the spool followed by the rest of the client's body, not
// yet read: the client's own bytes, never re-encoded. An upload that was
// spooled whole can be replayed, so a backend that could not be connected
// to is retried on another; one that was still streaming cannot.
//
// A `model` field that comes after a file part following the first
// `model` is not seen: the backend reads the form again and judges it.
//
// Disk: a spool holds at most max_audio_body_bytes (+1 MiB) and lives as
// long as its request, queue wait included. For an upload that streams,
// read_audio_body_timeout runs from its headers to its last byte, queue
// wait included.

// audioAPIs' body reader.
var (
	transcriptionsAPI = &api{read: readUpload, door: admission.Transcriptions, errors: openAIErrors}
	translationsAPI   = &api{read: readUpload, door: admission.Translations, errors: openAIErrors}
)

// formAllowance is what an upload's body may carry beyond
// max_audio_body_bytes: the limit is the audio's (OpenAI's and vLLM's 25
// MiB are the file's), and the form's boundaries, part headers and other
// fields come on top. A file vLLM accepts is never refused here.
const formAllowance = 1 << 20

// maxFormValue bounds a form field the gateway reads (`model`, stream,
// max_completion_tokens).
const maxFormValue = 1 << 10

// upload is an audio request's body as the pipeline forwards it: the
// bytes read so far in the spool, then the rest of the client's body.
type upload struct {
	form    admission.Form
	spool   *os.File
	removed bool // the spool's name is already unlinked
	spooled int64
	// complete: the whole body is in the spool (replayable).
	complete bool
	// rest is the client's body past the spool, under the limit; nil when
	// complete.
	rest io.Reader
	// restRead counts the bytes forwarded from rest.
	restRead int64
	// clearDeadline lifts the read deadline once the body is all in.
	clearDeadline func()
	limit         int64
	timeout       time.Duration
	// mu guards readErr: the transport reads rest on its own goroutine.
	mu      sync.Mutex
	readErr error
}

// readUpload is the audio APIs' bodyReader: it returns no bytes and hands
// the pipeline the streamed body in x.upload; the door checks its form
// (admission.Door.CheckForm).
func readUpload(g *Gateway, w http.ResponseWriter, r *http.Request, x *exchange) ([]byte, error) {
	limit, timeout := g.conf().MaxAudioBodyBytes+formAllowance, g.conf().ReadAudioBodyTimeout.D()
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		ct := r.Header.Get("Content-Type")
		msg := fmt.Sprintf("Content-Type must be multipart/form-data with a boundary, got %q.", ct)
		if ct == "" {
			msg = "Content-Type must be multipart/form-data; the request sent none."
		}
		return nil, g.rejected(x, &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: codeUnsupportedMedia,
			Outcome: admission.UnsupportedMedia.String(), Layer: triage.LayerDoor, Message: msg})
	}
	if r.ContentLength > limit {
		return nil, g.rejected(x, uploadTooLarge(limit))
	}
	up := &upload{limit: limit, timeout: timeout, clearDeadline: func() {}}
	if timeout > 0 {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
			// Cleared once the body is in: a read deadline left behind
			// would cut the server's watch for the client leaving.
			up.clearDeadline = sync.OnceFunc(func() { _ = rc.SetReadDeadline(time.Time{}) })
		}
	}
	if up.spool, err = os.CreateTemp("", "maitred-audio-*"); err != nil {
		up.clearDeadline()
		return nil, &Error{Status: http.StatusInternalServerError, Type: typeServer, Code: codeInternal, Layer: triage.LayerDoor,
			Message: "The gateway could not spool the upload.", Cause: err}
	}
	// Unlinked at once where the system allows it (the open file stays
	// readable): a spool never outlives its request, even if the process
	// dies; close removes it otherwise.
	up.removed = os.Remove(up.spool.Name()) == nil
	x.upload = up
	if err := up.read(http.MaxBytesReader(w, r.Body, limit), params["boundary"]); err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			return nil, e
		}
		return nil, g.uploadError(x, r, err)
	}
	return nil, nil
}

// read parses the form as it arrives, spooling every byte read, until it
// has seen `model` and the fields after it up to the next file part.
func (up *upload) read(body io.Reader, boundary string) error {
	tee := io.TeeReader(body, writerFunc(func(p []byte) (int, error) {
		n, err := up.spool.Write(p)
		up.spooled += int64(n)
		return n, err
	}))
	mr := multipart.NewReader(tee, boundary)
	want := map[string]bool{}
	for _, f := range admission.FormFields {
		want[f] = true
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			up.complete = true
			break
		}
		if err != nil {
			return err
		}
		name := part.FormName()
		switch {
		case up.form.HasModel && part.FileName() != "":
			// The rest streams: the spool holds everything read so far,
			// this part's first bytes included.
			up.rest = body
			_, err = up.spool.Seek(0, io.SeekStart)
			return err
		case name == "model" || want[name] && part.FileName() == "":
			v, err := io.ReadAll(io.LimitReader(part, maxFormValue+1))
			if err != nil {
				return err
			}
			if len(v) > maxFormValue {
				return badRequest(codeBodyRead, name, "The form field %q is longer than %d bytes.", name, maxFormValue)
			}
			if name == "model" {
				if up.form.HasModel {
					return badRequest(codeBodyRead, "model", "The form has more than one `model` field.")
				}
				up.form.Model, up.form.HasModel = string(v), true
				continue
			}
			if up.form.Fields == nil {
				up.form.Fields = map[string]string{}
			}
			up.form.Fields[name] = string(v) // the last one counts, as in starlette's form
		default:
			if _, err := io.Copy(io.Discard, part); err != nil { // spooled by the tee
				return err
			}
		}
	}
	up.clearDeadline()
	// Anything after the closing boundary (an epilogue) was read too.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return err
	}
	_, err := up.spool.Seek(0, io.SeekStart)
	return err
}

// attach returns the upstream body: the spool, then the rest of the
// client's body; with how to read it again and its length. The length is
// the client's own when it declared one (the bytes are the client's), the
// spool's when complete, or unknown (-1: chunked).
func (up *upload) attach(declared int64) (io.ReadCloser, func() (io.ReadCloser, error), int64) {
	open := func() io.Reader { return io.NewSectionReader(up.spool, 0, up.spooled) }
	if up.complete {
		return io.NopCloser(open()), func() (io.ReadCloser, error) { return io.NopCloser(open()), nil }, up.spooled
	}
	return io.NopCloser(io.MultiReader(open(), readerFunc(up.readRest))), nil, declared
}

// readRest reads the client's body past the spool for the transport; a
// failure is the client's (over the limit, too slow, gone), kept for the
// pipeline's answer.
func (up *upload) readRest(p []byte) (int, error) {
	n, err := up.rest.Read(p)
	up.mu.Lock()
	up.restRead += int64(n)
	if err != nil && err != io.EOF && up.readErr == nil {
		up.readErr = err
	}
	up.mu.Unlock()
	if err == io.EOF {
		up.clearDeadline()
	}
	return n, err
}

// failed returns the client's error while the body streamed, if any.
func (up *upload) failed() error {
	if up == nil {
		return nil
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	return up.readErr
}

// replayable reports whether another attempt can send the body again.
func (up *upload) replayable() bool { return up == nil || up.complete }

// bytes is how much of the client's body was read.
func (up *upload) bytes() int64 {
	up.mu.Lock()
	defer up.mu.Unlock()
	return up.spooled + up.restRead
}

// close removes the spool and lifts the read deadline; serve calls it as
// the request ends.
func (up *upload) close(x *exchange) {
	if up == nil {
		return
	}
	up.clearDeadline()
	x.bytesIn = int(up.bytes())
	_ = up.spool.Close()
	if !up.removed {
		_ = os.Remove(up.spool.Name())
	}
}

// uploadError is the answer when the client's body failed while it
// streamed to the backend.
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

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
