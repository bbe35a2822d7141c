package gateway

// The usage meter's fast read of an OpenAI stream chunk (chat,
// completions, audio): the objects of a chunk the meter reads
// (topObject, choiceObject, deltaObject, toolCallObject, functionObject
// in eventMembers), read by eventParser (proxy_usage_parse.go).

// decodeOpenAIChunk reads data as json.Unmarshal into meterOpenAIEvent's
// struct would, for the shape vLLM sends: an object whose members the
// struct names are of their own types or null, each named once and
// exactly, into e: its texts in the order meterOpenAIEventJSON streams
// them (per choice: text, content, reasoning_content, reasoning, then
// each tool call's name and arguments), its usage and where its "model"
// is. It reports false for anything else (invalid JSON, a member of
// another type, a member named twice or only under case folding, an
// escaped or non-ASCII member name, more than maxChunkTexts texts, a
// value nested deeper than maxSkipDepth, a usage that is not a flat
// object of integers): encoding/json reads it then.
func decodeOpenAIChunk(data []byte, e *meteredEvent) bool {
	e.n, e.usage, e.model = 0, usageValues{}, span{}
	p := eventParser{b: data, e: e}
	return p.object(topObject) && skipWS(data, p.i) == len(data)
}

// element reads an array's element: a choice takes the four slots of its
// texts first (its tool calls' come after them), a tool call reads its
// function.
func (p *eventParser) element(o eventObject) bool {
	if p.literal("null") {
		return true
	}
	if o == choiceObject {
		if p.e.n+4 > maxChunkTexts {
			return false
		}
		p.choice = p.e.n
		p.e.n += 4
		p.e.texts[p.choice] = chunkText{}
		p.e.texts[p.choice+1] = chunkText{}
		p.e.texts[p.choice+2] = chunkText{}
		p.e.texts[p.choice+3] = chunkText{}
	}
	return p.object(o)
}

// chunkMember reads the value of member k of a chunk's object o.
func (p *eventParser) chunkMember(o eventObject, k int) bool {
	switch o {
	case topObject:
		switch k {
		case 0:
			return p.array(choiceObject)
		case 1:
			return p.usage(&p.e.usage)
		}
		return p.anyValue(&p.e.model)
	case choiceObject:
		if k == 0 {
			return p.text(&p.e.texts[p.choice])
		}
		return p.object(deltaObject)
	case deltaObject:
		if k == 3 {
			return p.array(toolCallObject)
		}
		return p.text(&p.e.texts[p.choice+1+k])
	case toolCallObject:
		if p.literal("null") {
			return true
		}
		if p.e.n+2 > maxChunkTexts {
			return false
		}
		p.call = p.e.n
		p.e.n += 2
		p.e.texts[p.call], p.e.texts[p.call+1] = chunkText{}, chunkText{}
		return p.object(functionObject)
	}
	return p.text(&p.e.texts[p.call+k])
}
