package config

// The documentation is held to the code: every config key has a row in
// docs/configuration.md, every relative link and #anchor of README.md and
// docs/ resolves, and no table cell grows into a page.

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// configKeyPaths lists the key paths of a config type as the docs write
// them: health.interval, models[].backends[].url, auth.keys[].limits.
// tokens_per_minute. An inline struct adds its keys at its parent's level;
// a struct is a section (its keys listed, not the section itself); a list
// or map of structs adds [] or .* before its elements' keys; anything else
// (Duration included) is one key.
func configKeyPaths(typ reflect.Type, prefix string) []string {
	var keys []string
	for f := range typ.Fields() {
		tag := f.Tag.Get("yaml")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if opts == "inline" {
			keys = append(keys, configKeyPaths(ft, prefix)...)
			continue
		}
		path := prefix + name
		switch {
		case isSection(ft):
			keys = append(keys, configKeyPaths(ft, path+".")...)
		case (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array) && isSection(ft.Elem()):
			keys = append(keys, configKeyPaths(ft.Elem(), path+"[].")...)
		case ft.Kind() == reflect.Map && isSection(ft.Elem()):
			keys = append(keys, configKeyPaths(ft.Elem(), path+".*.")...)
		default:
			keys = append(keys, path)
		}
	}
	return keys
}

// isSection reports whether a YAML value of this type is a mapping of keys
// of its own (a struct without its own YAML decoding).
func isSection(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	_, custom := reflect.PointerTo(t).MethodByName("UnmarshalYAML")
	return !custom
}

// documentedConfigKeys returns the backticked names in the key column of
// docs/configuration.md's table of keys (the table whose header is
// "| key | default | meaning |").
func documentedConfigKeys(t *testing.T, doc string) map[string]bool {
	t.Helper()
	ticked := regexp.MustCompile("`([^`]+)`")
	keys := map[string]bool{}
	inTable := false
	for line := range strings.SplitSeq(doc, "\n") {
		switch {
		case line == "| key | default | meaning |":
			inTable = true
		case inTable && !strings.HasPrefix(line, "|"):
			inTable = false
		case inTable && !strings.HasPrefix(line, "|---"):
			cells := tableCells(line)
			for _, m := range ticked.FindAllStringSubmatch(cells[0], -1) {
				keys[m[1]] = true
			}
		}
	}
	if len(keys) == 0 {
		t.Fatal("docs/configuration.md has no table of keys (| key | default | meaning |)")
	}
	return keys
}

// tableCells splits a Markdown table row into its cells (an escaped \| is
// part of a cell).
func tableCells(line string) []string {
	parts := regexp.MustCompile(`(?:^|[^\\])\|`).FindAllStringIndex(line, -1)
	var cells []string
	prev := -1
	for _, p := range parts {
		bar := p[1] - 1
		if prev >= 0 {
			cells = append(cells, strings.TrimSpace(line[prev+1:bar]))
		}
		prev = bar
	}
	if len(cells) == 0 {
		return []string{line}
	}
	return cells
}

// TestEveryConfigKeyDocumented: each key the config file may hold, by
// its path (nested sections, lists of models, backends and keys), has a
// row in docs/configuration.md's table; and each key the table names is
// one the config holds, so the table cannot keep a key that was removed.
func TestEveryConfigKeyDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedConfigKeys(t, string(b))
	keys := configKeyPaths(reflect.TypeFor[Config](), "")
	for _, want := range []string{"listen", "health.interval", "store", "models[].backends[].url",
		"auth.keys[].limits.tokens_per_minute", "auth.keys_file", "tracing.sampling_ratio"} {
		if !slices.Contains(keys, want) {
			t.Fatalf("the walk of Config's yaml tags misses %s: %q", want, keys)
		}
	}
	for _, k := range keys {
		if !documented[k] {
			t.Errorf("config key %s has no row in docs/configuration.md's table of keys", k)
		}
	}
	for k := range documented {
		if !slices.Contains(keys, k) {
			t.Errorf("docs/configuration.md documents %s, which is not a config key", k)
		}
	}
}

// markdownFiles are the documents held to these tests: README.md and
// every page under docs/.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no pages under docs/")
	}
	return append([]string{filepath.Join("..", "README.md")}, pages...)
}

// withoutCode blanks fenced code blocks and inline code, where a [x](y)
// is not a link.
func withoutCode(doc string) string {
	var out []string
	fenced := false
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			out = append(out, "")
			continue
		}
		if fenced {
			out = append(out, "")
			continue
		}
		out = append(out, regexp.MustCompile("`[^`]*`").ReplaceAllString(line, "``"))
	}
	return strings.Join(out, "\n")
}

// headingAnchors returns the #anchors GitHub gives a document's headings:
// the heading's text lowercased, punctuation dropped, spaces as hyphens,
// a repeated one suffixed -1, -2, ...
func headingAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if text == "" || text[0] != ' ' {
			continue
		}
		text = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(strings.TrimSpace(text), "$1")
		var a strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		s := a.String()
		if n := seen[s]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	return anchors
}

// TestDocsLinksResolve: every relative link of README.md and docs/*.md
// names a file or folder of the repository, and every #anchor a heading
// of the page it points into.
func TestDocsLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.ToSlash(file), "../")
		for _, m := range link.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: %v", name, target, err)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %s: an anchor into a file that is not Markdown", name, target)
				continue
			}
			db, err := os.ReadFile(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !headingAnchors(string(db))[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", name, target, filepath.Base(dest), anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the parser is broken")
	}
}

// maxTableCell bounds a table cell, so that a table stays a table: what
// takes longer goes below it, as a paragraph or a section.
const maxTableCell = 500

// TestDocsTableCellsShort: no table cell of README.md or docs/*.md runs
// past maxTableCell characters.
func TestDocsTableCellsShort(t *testing.T) {
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.ToSlash(file), "../")
		for i, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "|") {
				continue
			}
			for _, c := range tableCells(line) {
				if n := len([]rune(c)); n > maxTableCell {
					t.Errorf("%s:%d: a table cell of %d characters (at most %d): %.80s…", name, i+1, n, maxTableCell, c)
				}
			}
		}
	}
}

// TestHeadingAnchors pins the anchor rule the link test relies on.
func TestHeadingAnchors(t *testing.T) {
	got := headingAnchors("# Keys and quotas\n## Errors the gateway makes itself\n### 2a. The door for a 1,000-token chat\n" +
		"## A traced request's recording\n```\n# not a heading\n```\n## Notes\n## Notes\n### `POST /tokenize`\n")
	for _, want := range []string{"keys-and-quotas", "errors-the-gateway-makes-itself", "2a-the-door-for-a-1000-token-chat",
		"a-traced-requests-recording", "notes", "notes-1", "post-tokenize"} {
		if !got[want] {
			t.Errorf("no anchor %s in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line in a code block was taken for a heading")
	}
}
