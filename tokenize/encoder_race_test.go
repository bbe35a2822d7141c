//go:build race

package tokenize

// raceEnabled: the race detector slows the tokenizer 5-10×; timing limits
// scale and the oracle tests sample the corpus instead of reading all of it.
const raceEnabled = true
