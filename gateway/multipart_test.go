package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"strings"
	"testing"
)

// formPartRead is a part as a parser read it.
type formPartRead struct {
	name string
	file bool
	body string
}

// readStrict reads body with formReader: its parts, or its refusal.
func readStrict(body []byte, boundary string) ([]formPartRead, error) {
	f := &formReader{br: bufio.NewReaderSize(bytes.NewReader(body), formBuffer), delim: []byte("\r\n--" + boundary)}
	var parts []formPartRead
	err := f.begin()
	for err == nil {
		var p part
		if p, err = f.head(); err != nil {
			break
		}
		var b strings.Builder
		err = f.body(&b)
		parts = append(parts, formPartRead{p.name, p.file, b.String()})
	}
	if err == errLastPart {
		err = nil
	}
	return parts, err
}

// readGo reads body with Go's mime/multipart, each part's name and
// filename from its Content-Disposition as mime.ParseMediaType reads it.
func readGo(body []byte, boundary string) ([]formPartRead, error) {
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var parts []formPartRead
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			return parts, nil
		}
		if err != nil {
			return nil, err
		}
		typ, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		if err != nil || typ != "form-data" {
			return nil, errors.New("not form-data")
		}
		_, file := params["filename"]
		b, err := io.ReadAll(p)
		if err != nil {
			return nil, err
		}
		parts = append(parts, formPartRead{params["name"], file, string(b)})
	}
}

// FuzzFormReaderAgreesWithGo: a form the strict reader accepts is read
// alike by Go's mime/multipart: the same parts, names, file or field, and
// bodies. (vLLM's python-multipart is the reader that matters; the strict
// subset is built from its rules, and Go's is a second, independent one.)
// The seeds run as a test.
func FuzzFormReaderAgreesWithGo(f *testing.F) {
	m := rawField("model", "m")
	for _, seed := range []string{
		m + rawFile + rawEnd,
		rawFile + m + rawField("stream", "true") + rawEnd + "epilogue",
		rawPart("Content-Disposition: form-data; name=\"file\"; filename=\"caf\xc3\xa9 \\\"1\\\".wav\"\r\n", "RIFF\r\n--Bo\r\n--") + rawPart("content-disposition: FORM-DATA ;NAME=model\r\n", "m") + rawEnd,
		rawPart("Content-Disposition: form-data; name=\"\"\r\n", "") + rawPart("Content-Disposition: form-data; name=a; filename=\"\"\r\nContent-Type: text/plain\r\n", "x\r\n") + rawEnd,
		"--B--\r\n",
		// Refused by the strict reader (the property holds vacuously).
		m + rawFile + rawField("model", "other") + rawEnd,
		m + rawFile + rawPart("Content-Disposition: form-data; name=\"x\"; name=\"model\"\r\n", "other") + rawEnd,
		m + rawPart("Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n", "RIFF\r\n--B \r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nother") + rawEnd,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		strict, err := readStrict(body, "B")
		if err != nil {
			return
		}
		goParts, err := readGo(body, "B")
		if err != nil {
			t.Fatalf("the strict reader accepted %q; Go's refused it: %v", body, err)
		}
		if len(strict) != len(goParts) {
			t.Fatalf("%q: strict read %d parts, Go %d", body, len(strict), len(goParts))
		}
		for i := range strict {
			if strict[i] != goParts[i] {
				t.Fatalf("%q: part %d: strict %+v, Go %+v", body, i, strict[i], goParts[i])
			}
		}
	})
}

// TestHeaderParams: the strict parameter reader against what Go's
// mime.ParseMediaType reads, where both accept; and its refusals.
func TestHeaderParams(t *testing.T) {
	for _, v := range []string{
		`form-data; name="model"`,
		`form-data;name=model`,
		"form-data ;\tname = \"a;b\" ; filename=\"x \\\"y\\\".wav\"",
		`multipart/form-data; boundary="--x y"; charset=UTF-8`,
		`form-data; name="caf` + "\xc3\xa9" + `"`,
	} {
		typ, params, problem := headerParams(v)
		if problem != "" {
			t.Errorf("%q refused: %s", v, problem)
			continue
		}
		gt, gp, err := mime.ParseMediaType(v)
		if err != nil {
			t.Errorf("%q: Go's mime refuses it: %v", v, err)
			continue
		}
		if !strings.EqualFold(typ, gt) || len(params) != len(gp) {
			t.Errorf("%q: %q %v, Go %q %v", v, typ, params, gt, gp)
		}
		for k, want := range gp {
			if params[k] != want {
				t.Errorf("%q: %s = %q, Go %q", v, k, params[k], want)
			}
		}
	}
	for _, v := range []string{
		`form-data; name="x"; name="model"`,
		`form-data; name="x"; Name="model"`,
		`form-data; name*=utf-8''model`,
		`form-data; name="mo\del"`,
		`form-data; name="model`,
		`form-data; model`,
		`form-data; name=`,
		`form-data;; name=model`,
		`form-data; name="model" x`,
		`form-data; name=mo"del"`,
		"form-data; name=\"mo\x00del\"",
		`; name=model`,
	} {
		if _, _, problem := headerParams(v); problem == "" {
			t.Errorf("%q accepted", v)
		}
	}
}
