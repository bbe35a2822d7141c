package tokenize

// The tiktoken-go oracle (tiktokenFromHF, encoder_diff_test.go) is built
// from a loaded tokenizer's ranks, which a tokenizer otherwise drops once
// its tables are built; encoding never reads them either way.
func init() { keepRanks = true }
