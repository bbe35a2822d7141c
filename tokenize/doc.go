// Package tokenize counts prompt tokens exactly as vLLM will: the model's
// Hugging Face chat template, then its tokenizer.
//
// # Tokenizers
//
// A [Tokenizer] is loaded from a tokenizer.json ([LoadTokenizerJSON],
// [ParseTokenizerJSON]) or is one of OpenAI's cl100k_base and o200k_base
// ([NewOpenAI], ranks embedded by tiktoken-go-loader, no network). It
// implements [Encoder]; see doc_tokenizer.go for the pipeline, what is
// supported and the known differences from the Rust reference.
//
// Decoding ([Tokenizer.Decode], [Model.Detokenize], decoder.go) runs the
// tokenizer.json decoder as Hugging Face does (ByteLevel; Replace,
// ByteFallback, Fuse, Strip), then transformers' clean-up when
// tokenizer_config.json asks for it; any other decoder is not exact.
// [Model.VocabSize] is the bound vLLM holds prompt ids to: the larger of
// the tokenizer's length ([Tokenizer.Size]) and config.json's vocab_size.
// [Model.TokenizeChatWithin] and [Model.TokenizeCompletionWithin] build
// ids only for a prompt within a limit, counted first with counting's
// early stop and byte bounds.
//
// # Chat templates
//
// A [Model] is a model folder loaded the way vLLM loads it ([LoadDir]):
// its tokenizer, its special tokens and its chat template (chat_template.jinja
// or .json over tokenizer_config.json, or an override). Rendering follows
// transformers' apply_chat_template with add_generation_prompt=true.
//
// A [Loader] (loader.go) loads folders as LoadDir does and shares what is
// identical by content (SHA-256 of the files): one *Tokenizer per
// tokenizer.json's bytes (and BOS/EOS rebuild), one *Template per source,
// one *Model per identical set of inputs, whatever the folder's path. It
// is made by its user (the gateway's command, for start and reloads) and
// loads in passes ([LoadPass], one config's models: each file hashed once
// per pass, so a changed file loads fresh at the next); [Loader.Keep]
// drops what the models in force no longer use.
//
// Templates are lexed here exactly as jinja2 lexes them (trim_blocks,
// lstrip_blocks, {%- -%}; template_lex.go), then parsed and rendered by
// the package's own evaluator, its only template engine: jinja_lex.go
// (the expression scanner), jinja_parse.go (jinja2's grammar),
// jinja_resolve.go (variables resolved to frame slots), jinja_compile*.go
// (compiled once into closures: the shapes chat templates are made of,
// such as message['role'] == 'user', loop.index0, a + chain of literals
// and fields, read fields in place without dispatch, conditions as bools,
// ints without values; anything else calls the tree walker on its node),
// jinja_eval.go (the tree walker: statements, output, jinja2's scoping
// and Undefined), jinja_loop.go (for loops), jinja_ops.go (Python's
// operators), jinja_access.go (attributes, items, slices), jinja_call.go
// (calls with f(*args, **kwargs) unpacking, globals, macros),
// jinja_methods.go, jinja_tests.go and jinja_filters*.go (str and dict
// methods, tests and filters, as tables of functions), jinja_value.go
// (the values: small structs, ordered dicts; Python's str(), repr, ==,
// tojson) and template_py.go (Python's float
// repr, string repr, json string escaping, %-formatting and strftime). A
// render runs over these values into one pre-sized buffer; a chat
// request's variables are built directly as them (count_chat.go), and
// [Template.Render] takes them by name ([Value], [ParseValue]). Where
// Python would raise an error the evaluator does not reproduce, or would
// print something it does not reproduce, it declines (not exact) rather
// than guess.
//
// A template the evaluator does not parse or implement does not fail the
// load: the model keeps it as uncompiled ([Template.CompileErr],
// [Model.TemplateProblems]: the template line and the reason) and every
// chat request that would render it is not exact, so the gateway forwards
// it uncounted, as vLLM (Python's jinja2) may well render it.
// raise_exception and strftime_now are provided as vLLM provides them.
// Every fixture model's template compiles (TestOwnedFixtureTemplates);
// FuzzOwnedDifferential renders random conversations on a request's
// prepared variables and on the same variables given by name, and
// requires the same outcome and no evaluator failure.
//
// testdata/chat holds the goldens generated from Python jinja2 and HF
// tokenizers (tools/chatgolden): whole conversations per fixture model and
// single-feature templates, with the remaining feature gaps listed in
// template_test.go.
//
// The template corpus is the 97 Hugging Face chat templates of the npm
// package @huggingface/ollama-utils (MIT), which scripts/fetch-fixtures.sh
// downloads, verifies by its integrity and extracts to .fixtures/templates
// (with index.json: each file's model and sha256); none of it is committed.
// tools/chatgolden/corpus.py renders each over the conversations of
// testdata/corpus.cases.jsonl with Python jinja2 and writes
// testdata/corpus.golden.jsonl, which holds hashes only: per template and
// conversation, the template's sha256 and the SHA-256 and byte length of
// jinja2's text, or the error jinja2 raised. TestTemplateCorpus requires
// the evaluator's text to hash the same wherever jinja2 rendered, an
// error or a decline wherever it raised, and every template to load;
// the templates where it knowingly differs are listed, with the reason,
// in template_corpus_test.go.
//
// # Exactness
//
// Counting never guesses. A template no path can parse loads as
// uncompiled, its chat requests not exact. At render time, a template that raises is a
// [TemplateError] (the client's 400, in the template's words); a request
// vLLM would refuse while preparing it is an [InputError]; anything this
// package cannot reproduce exactly, including an evaluator failure or panic,
// is a [NotExactError] (or Count.Exact false), and the caller forwards the
// request uncounted for vLLM to decide.
//
// A [CountCache] counts the next turn of a conversation without
// tokenizing again what an earlier turn's count tokenized: the rendered
// text is counted from the last added-token boundary it shares with a text
// counted before (keyed by SHA-256, no text kept), which gives the same
// count as a full count for every tokenizer it accepts (Register probes the
// identity it relies on); its memory is bounded by a byte budget, least
// recently used first. Its keyed counts (CountChatKeys,
// countcache_keys.go) also key the prompt's full blocks with a caller's
// chained hash (precise routing), each node keeping the chain's state at
// its boundary (kept a kilobyte apart and at the text's last few
// boundaries), so that a later turn tokenizes and keys only its new
// tail; the ids of a text are the concatenation of its segments' between
// added-token boundaries, for the reason its count is their sum.
//
// # Concurrency
//
// A loaded Model and Tokenizer are immutable and safe for concurrent use
// (which is what lets a Loader share them between models);
// each render gets its own variables. Two pools trade allocation for
// reuse, and both rely on nothing outliving the render that made it: a
// Model pools its prepared chat requests with their message slabs
// (released once the render is done; the output and the errors are
// separate strings), and each owned template pools its renderers, whose
// arena holds the strings the render concatenates (raised messages are
// cloned out of it). A CountCache and a Loader are safe for concurrent
// use; two goroutines loading one tokenizer at once through a Loader
// parse it once.
package tokenize
