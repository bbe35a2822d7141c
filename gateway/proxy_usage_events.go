package gateway

// The usage meter's fast read of a Responses and of an Anthropic Messages
// stream event: the objects of each the meter reads (responsesObject,
// responseObject; anthropicObject, messageObject, anthropicDeltaObject in
// eventMembers), read by eventParser (proxy_usage_parse.go) exactly as
// encoding/json reads them into meterResponsesEventJSON's and
// meterAnthropicEventJSON's structs.

// decodeResponsesEvent reads a Responses event into e: its type (a
// string without escapes, or null), its delta when that is a string
// (texts[0]; any other value is checked and dropped, as the struct's
// json.RawMessage is when it does not decode as a string), and its
// response's id and model (any value) and usage. It reports false for
// anything it cannot read as encoding/json does: encoding/json reads it
// then.
func decodeResponsesEvent(data []byte, e *meteredEvent) bool {
	e.n, e.texts[0], e.typ, e.usage, e.model, e.id = 1, chunkText{}, chunkText{}, usageValues{}, span{}, span{}
	p := eventParser{b: data, e: e}
	return p.object(responsesObject) && skipWS(data, p.i) == len(data) && (e.typ.plain || e.typ.start == e.typ.end)
}

// decodeAnthropicEvent reads an Anthropic Messages event into e: its type
// (a string without escapes, or null), its delta's text, partial_json
// and thinking (texts[0:3]), its message's usage (startUsage) and model
// (any value) and its usage. It reports false for anything it cannot
// read as encoding/json does: encoding/json reads it then.
func decodeAnthropicEvent(data []byte, e *meteredEvent) bool {
	e.n, e.typ, e.usage, e.startUsage, e.model = 3, chunkText{}, usageValues{}, usageValues{}, span{}
	e.texts[0], e.texts[1], e.texts[2] = chunkText{}, chunkText{}, chunkText{}
	p := eventParser{b: data, e: e}
	return p.object(anthropicObject) && skipWS(data, p.i) == len(data) && (e.typ.plain || e.typ.start == e.typ.end)
}

// eventMember reads the value of member k of a Responses or Anthropic
// event's object o.
func (p *eventParser) eventMember(o eventObject, k int) bool {
	switch o {
	case responsesObject:
		switch k {
		case 0:
			return p.text(&p.e.typ)
		case 1:
			if p.i < len(p.b) && p.b[p.i] == '"' {
				return p.text(&p.e.texts[0])
			}
			return p.skip(0)
		}
		return p.object(responseObject)
	case responseObject:
		switch k {
		case 0:
			return p.anyValue(&p.e.id)
		case 1:
			return p.usage(&p.e.usage)
		}
		return p.anyValue(&p.e.model)
	case anthropicObject:
		switch k {
		case 0:
			return p.text(&p.e.typ)
		case 1:
			return p.object(messageObject)
		case 2:
			return p.object(anthropicDeltaObject)
		}
		return p.usage(&p.e.usage)
	case messageObject:
		if k == 0 {
			return p.usage(&p.e.startUsage)
		}
		return p.anyValue(&p.e.model)
	}
	return p.text(&p.e.texts[k])
}

// typeIs says whether the event's type (read plain) is t.
func (e *meteredEvent) typeIs(data []byte, t string) bool {
	return string(data[e.typ.start:e.typ.end]) == t
}
