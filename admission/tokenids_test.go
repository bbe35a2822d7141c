package admission

import (
	"testing"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// TestCheckTokenIDs is the one token-id rule every endpoint that takes ids
// uses (the completions prompt, the pooling input, /detokenize): the first
// entry that is not an id is refused with a 400 naming it (param[i]), in
// vLLM's words past the path, invalid_type for an entry that is not an
// integer and invalid_value for an integer outside the vocabulary; a list
// of ids passes.
func TestCheckTokenIDs(t *testing.T) {
	cases := []struct {
		name, ids, param string
		vocab            int
		code, at, msg    string // code "": accepted
	}{
		{"ids inside the vocabulary", `[0,1,99]`, "input", 100, "", "", ""},
		{"empty list", `[]`, "input", 100, "", "", ""},
		{"the vocabulary's last id", `[99]`, "tokens", 100, "", "", ""},
		{"vocabulary not known", `[2147483647]`, "prompt", 0, "", "", ""},
		{"the vocabulary's size", `[1,100]`, "tokens", 100, "invalid_value", "tokens[1]",
			"tokens[1]: Token id 100 is out of vocabulary: this model's token ids are 0 to 99."},
		{"past any int64", `[99999999999999999999]`, "input", 100, "invalid_value", "input[0]",
			"input[0]: Token id 99999999999999999999 is out of vocabulary: this model's token ids are 0 to 99."},
		{"past 32 bits, vocabulary not known", `[2147483648]`, "prompt", 0, "invalid_value", "prompt[0]",
			"prompt[0]: Token id 2147483648 is out of vocabulary: token ids are at most 2147483647."},
		{"negative", `[1,-2]`, "prompt", 100, "invalid_value", "prompt[1]",
			"prompt[1]: must be a token id (a non-negative integer), got -2."},
		// pydantic's lax int, as vLLM reads the list: -0 is 0, and a float
		// with no fractional part is that integer
		{"minus zero", `[-0]`, "input", 100, "", "", ""},
		{"integral floats", `[1.0,2e1,3.00,-0.0]`, "input", 100, "", "", ""},
		{"integral float past the vocabulary", `[1e2]`, "tokens", 100, "invalid_value", "tokens[0]",
			"tokens[0]: Token id 1e2 is out of vocabulary: this model's token ids are 0 to 99."},
		{"negative float", `[-1.0]`, "input", 100, "invalid_value", "input[0]",
			"input[0]: must be a token id (a non-negative integer), got -1.0."},
		{"float", `[1,2.5]`, "input[1]", 100, "invalid_type", "input[1][1]",
			"input[1][1]: must be a token id (an integer), got 2.5."},
		{"exponent with a fraction", `[1.5e0]`, "tokens", 0, "invalid_type", "tokens[0]",
			"tokens[0]: must be a token id (an integer), got 1.5e0."},
		{"string", `[1,"7"]`, "tokens", 100, "invalid_type", "tokens[1]",
			"tokens[1]: must be a token id (an integer), got string."},
		{"null", `[null]`, "input", 100, "invalid_type", "input[0]",
			"input[0]: must be a token id (an integer), got null."},
		{"nested list", `[[1]]`, "prompt[0]", 100, "invalid_type", "prompt[0][0]",
			"prompt[0][0]: must be a token id (an integer), got array."},
		{"the first bad entry is named", `[5,-1,2.5,100]`, "input", 100, "invalid_value", "input[1]",
			"input[1]: must be a token id (a non-negative integer), got -1."},
	}
	for _, c := range cases {
		v, err := ojson.Parse([]byte(c.ids), ojson.DefaultMaxDepth)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		rej := CheckTokenIDs(v, c.param, c.vocab)
		if c.code == "" {
			if rej != nil {
				t.Errorf("%s: refused %+v, want accepted", c.name, rej)
			}
			if rej := promptIDs(v, c.param, c.vocab); rej != nil {
				t.Errorf("%s: prompt refused %+v, want accepted", c.name, rej)
			}
			continue
		}
		wantIDRejection(t, c.name, rej, InvalidInput, c.code, c.at, c.msg)
		// The completions prompt names its refusal InvalidPrompt and says
		// invalid_value for every entry that is not an id.
		wantIDRejection(t, c.name+" (prompt)", promptIDs(v, c.param, c.vocab), InvalidPrompt, "invalid_value", c.at, c.msg)
	}
}

func wantIDRejection(t *testing.T, name string, rej *Rejection, reason Reason, code, param, msg string) {
	t.Helper()
	switch {
	case rej == nil:
		t.Errorf("%s: accepted, want %s at %s", name, code, param)
	case rej.Reason != reason || rej.Status != 400 || rej.Code != code || rej.Param != param || rej.Message != msg || rej.Context != nil:
		t.Errorf("%s:\n got %s %d %s %s %q (context %v)\nwant %s 400 %s %s %q", name,
			rej.Reason, rej.Status, rej.Code, rej.Param, rej.Message, rej.Context, reason, code, param, msg)
	}
}
