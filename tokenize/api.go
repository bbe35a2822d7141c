package tokenize

// This file is the contract the rest of maitred relies on. The types below
// are implemented across the package (tokenizers in encoder_*.go, chat
// templates in template_*.go, model folders in model.go).

// Encoder turns text into the token ids the model's Hugging Face tokenizer
// produces. Implementations are safe for concurrent use.
type Encoder interface {
	// Encode returns the ids for text. Added tokens (special or not) that
	// occur in text are matched leftmost-longest before normalization, as HF
	// does. addSpecial applies the tokenizer's post-processor (for example
	// Llama's BOS), as HF's add_special_tokens=True.
	Encode(text string, addSpecial bool) []int
	// AppendEncode appends Encode(text, addSpecial) to dst and returns
	// it: the door's precise routing keys a prompt's blocks from ids in
	// a pooled buffer (an encoder without it would route every request
	// of a precise model without its index, silently).
	AppendEncode(dst []int, text string, addSpecial bool) []int
	// Count returns len(Encode(text, addSpecial)) without building the id
	// slice. When limit > 0 it may stop as soon as the count exceeds limit;
	// it then returns a lower bound n > limit and exact=false.
	Count(text string, addSpecial bool, limit int) (n int, exact bool)
}
