package gateway

import (
	"encoding/json"
	"strconv"
	"strings"
)

// usageKeys are usageNumbers' JSON names, in field order.
var usageKeys = [...]string{"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "total_tokens"}

// decodeUsage reads a usage object into u (zero on entry) exactly as
// json.Unmarshal(b, u) would, and reports whether that succeeded. The
// shape every backend sends, a flat object of plain ASCII keys whose
// values are integers or null, is read in one pass without allocating;
// anything else (nested values, fractions, escapes in a key, a key that
// matches a field only under case folding, an integer beyond int64) is
// left to encoding/json itself.
func decodeUsage(b []byte, u *usageNumbers) bool {
	var got usageNumbers
	var vals [len(usageKeys)]int64
	fields := [...]**int64{&got.PromptTokens, &got.CompletionTokens, &got.InputTokens, &got.OutputTokens, &got.TotalTokens}
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return json.Unmarshal(b, u) == nil
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			// "key"
			if i >= len(b) || b[i] != '"' {
				return json.Unmarshal(b, u) == nil
			}
			j := i + 1
			for j < len(b) && b[j] != '"' && b[j] != '\\' && b[j] >= 0x20 && b[j] < 0x80 {
				j++
			}
			if j >= len(b) || b[j] != '"' {
				return json.Unmarshal(b, u) == nil
			}
			key := b[i+1 : j]
			i = skipWS(b, j+1)
			if i >= len(b) || b[i] != ':' {
				return json.Unmarshal(b, u) == nil
			}
			i = skipWS(b, i+1)
			// an integer or null
			j = i
			isNull := false
			switch {
			case j+4 <= len(b) && string(b[j:j+4]) == "null":
				j += 4
				isNull = true
			default:
				var ok bool
				if j, ok = intEnd(b, j); !ok {
					return json.Unmarshal(b, u) == nil
				}
			}
			lit := b[i:j]
			i = skipWS(b, j)
			if i >= len(b) || (b[i] != ',' && b[i] != '}') {
				return json.Unmarshal(b, u) == nil // a fraction, an exponent, or no separator
			}
			f := -1
			for k, name := range usageKeys {
				if string(key) == name {
					f = k
					break
				}
			}
			if f < 0 {
				for _, name := range usageKeys {
					if strings.EqualFold(string(key), name) {
						return json.Unmarshal(b, u) == nil
					}
				}
			}
			if f >= 0 {
				if isNull {
					*fields[f] = nil
				} else {
					n, err := strconv.ParseInt(string(lit), 10, 64)
					if err != nil {
						return json.Unmarshal(b, u) == nil
					}
					vals[f] = n
					*fields[f] = &vals[f]
				}
			}
			if b[i] == '}' {
				i++
				break
			}
			i = skipWS(b, i+1)
		}
	}
	if skipWS(b, i) != len(b) {
		return json.Unmarshal(b, u) == nil
	}
	*u = got
	return true
}

// skipWS is the index of the first byte at or after i that is not JSON
// whitespace.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
