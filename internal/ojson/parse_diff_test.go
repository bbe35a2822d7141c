package ojson

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// strBytewise is the reference string reader: one byte (or one UTF-8
// sequence, or one escape) at a time, with no word-at-a-time scan and no
// second pass, so each error is the first a reader meets going forward.
func strBytewise(p *parser) (string, error) {
	d := p.data
	var buf []byte
	for i := p.pos + 1; i < len(d); {
		c := d[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return string(buf), nil
		case c < 0x20:
			return "", p.errorf(i, "control character %s in a string", quoteByte(c))
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && n == 1 {
				return "", p.errorf(i, "invalid UTF-8 in a string")
			}
			buf = append(buf, d[i:i+n]...)
			i += n
			continue
		case c != '\\':
			buf = append(buf, c)
			i++
			continue
		}
		if i+1 >= len(d) {
			return "", p.errorf(i, "unexpected end of JSON input in a string")
		}
		if to, ok := jsonEscapes[d[i+1]]; ok {
			buf = append(buf, to)
			i += 2
			continue
		}
		if d[i+1] != 'u' {
			return "", p.errorf(i, "invalid escape %s in a string", quoteByte(d[i+1]))
		}
		r, ok := hex4(d, i+2)
		if !ok {
			return "", p.errorf(i, "invalid \\u escape")
		}
		n := 6
		if utf16.IsSurrogate(r) {
			lo := rune(-1)
			if i+12 <= len(d) && d[i+6] == '\\' && d[i+7] == 'u' {
				if l, ok := hex4(d, i+8); ok {
					lo = l
				}
			}
			if r = utf16.DecodeRune(r, lo); r == utf8.RuneError {
				return "", p.errorf(i, "invalid \\u escape: unpaired surrogate")
			}
			n = 12
		}
		buf = utf8.AppendRune(buf, r)
		i += n
	}
	return "", p.errorf(len(d), "unexpected end of JSON input in a string")
}

// jsonEscapes are the one-character escapes and what they stand for.
var jsonEscapes = map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// sameParse reports how Parse and the same parser reading strings with
// strBytewise differ on data ("" when they agree on the value, every
// span, or the error's offset, path and message).
func sameParse(data []byte) string {
	v, err := Parse(data, 0)
	rv, rerr := parse(data, 0, strBytewise)
	if (err == nil) != (rerr == nil) {
		return "error " + errString(err) + ", reference " + errString(rerr)
	}
	if err != nil {
		if !reflect.DeepEqual(err, rerr) {
			return "error " + errString(err) + ", reference " + errString(rerr)
		}
		return ""
	}
	if !reflect.DeepEqual(v, rv) {
		return "values differ"
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// diffDocs are documents whose strings cross the eight-byte scan's word
// boundaries with escapes, non-ASCII text, control characters and quotes.
var diffDocs = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	`{"a":[1,2.5,-3e2,true,false,null,"x\n\u00e9"]}`,
	`"plain ascii runs of more than eight bytes \" with a quote"`,
	`"12345678\\12345678é12345678\u0041"`,
	`{"s":"naïve café — 数字 😀 done\n\tline two \"q\" \u003cb\u003e \ud83d\ude00 end","t":"ab"}`,
	`["", "a", "ab\\", "abcdefg\"", "abcdefgh", "abcdefghi\\n", "\u0000\u001f", "é", "éé\u00e9"]`,
	"{\"k\u00e9y\":{\"nested\":[{\"x\":\"\\/\\b\\f\\r\\t\"}]},\"role\":\"assistant\",\"content\":\"\"}",
	"[\"ab\xffcd\\q\", \"é\xe2\x82\\u00zz\", \"x\xc3\\n\x01\"]",
	`{"role":"user","role ":"x","content":{"type":"text","text":"t"},"tools":[],"n":01}`,
}

// TestParseMatchesReference runs both parsers on each document, each of
// its prefixes, and each single-byte substitution from a set of bytes that
// matter to the string scan.
func TestParseMatchesReference(t *testing.T) {
	subs := []byte{'"', '\\', 'u', 'n', 0x00, 0x1f, 0x7f, 0x80, 0xbf, 0xc3, 0xe2, 0xed, 0xf0, 0xff, ' ', '0', '}', ']'}
	long := `"` + strings.Repeat(`abc\ndé€😀 "x"\u00e9`, 20) + `"`
	for _, doc := range append(diffDocs, long, `{"c":`+long+`}`) {
		if d := sameParse([]byte(doc)); d != "" {
			t.Fatalf("%q: %s", doc, d)
		}
		for n := range len(doc) {
			if d := sameParse([]byte(doc[:n])); d != "" {
				t.Fatalf("prefix %q: %s", doc[:n], d)
			}
		}
		for i := range len(doc) {
			for _, c := range subs {
				b := []byte(doc)
				b[i] = c
				if d := sameParse(b); d != "" {
					t.Fatalf("%q: %s", b, d)
				}
			}
		}
	}
}

// FuzzParseMatchesReference: Parse and the byte-by-byte string reader agree on every
// input, errors included.
func FuzzParseMatchesReference(f *testing.F) {
	for _, s := range diffDocs {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if d := sameParse(data); d != "" {
			t.Fatalf("%q: %s", data, d)
		}
	})
}
