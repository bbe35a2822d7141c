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
package tokenize
