package gateway

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// usageKeys are usageNumbers' JSON names, in field order.
var usageKeys = [...]string{"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "total_tokens"}

// decodeUsage reads a usage object into u, exactly as
// json.Unmarshal(b, u) would, and reports whether that succeeded. The
// common shape (an object whose members named like a field hold integers
// or null) is read from ojson's tree without reflection; anything else
// (a member of another type, a fraction, an exponent, an integer beyond
// int64, a document ojson refuses) is left to encoding/json itself.
func decodeUsage(b []byte, u *usageNumbers) bool {
	v, err := ojson.Parse(b, 4)
	if err != nil || v.Kind != ojson.Object {
		return json.Unmarshal(b, u) == nil
	}
	var got usageNumbers
	fields := [...]**int64{&got.PromptTokens, &got.CompletionTokens, &got.InputTokens, &got.OutputTokens, &got.TotalTokens}
	var vals [len(usageKeys)]int64
	for _, m := range v.Members {
		i := usageField(m.Key)
		if i < 0 {
			continue // encoding/json skips unknown members (any valid value)
		}
		switch m.Value.Kind {
		case ojson.Null:
			*fields[i] = nil // null on a pointer field sets it to nil
		case ojson.Number:
			n, err := strconv.ParseInt(m.Value.Str, 10, 64)
			if err != nil {
				return json.Unmarshal(b, u) == nil
			}
			vals[i] = n
			*fields[i] = &vals[i] // a later duplicate wins, as in encoding/json
		default:
			return json.Unmarshal(b, u) == nil
		}
	}
	*u = got
	return true
}

// usageField is the index in usageKeys of the field encoding/json would
// decode key into: the exact name, or else one equal to it under Unicode
// case folding (encoding/json's rule); -1 for none.
func usageField(key string) int {
	for i, k := range usageKeys {
		if key == k {
			return i
		}
	}
	for i, k := range usageKeys {
		if strings.EqualFold(key, k) {
			return i
		}
	}
	return -1
}
