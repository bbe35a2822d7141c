package sim

import (
	"context"
	"encoding/json"
)

func (ev *respEvents) send(name string, v any) error {
	switch x := v.(type) {
	case *responseStateEvent:
		x.SequenceNumber = ev.seq
	case *itemEvent:
		x.SequenceNumber = ev.seq
	case *partEvent:
		x.SequenceNumber = ev.seq
	case *textDeltaEvent:
		x.SequenceNumber = ev.seq
	case *textDoneEvent:
		x.SequenceNumber = ev.seq
	case responseErrorEvent:
		x.SequenceNumber = ev.seq
		v = x
	}
	ev.seq++
	return ev.emit(name, marshal(v))
}

// run sends the opening events and generates the job with one delta per
// token, then the done events (not response.completed).
func (ev *respEvents) run(ctx context.Context, j *job, base *responseObject) error {
	initial := *base
	for _, t := range []string{"response.created", "response.in_progress"} {
		if err := ev.send(t, &responseStateEvent{Response: &initial, Type: t}); err != nil {
			return j.fail(ctx, errClientGone, "write")
		}
	}
	err := j.run(ctx, func(step int, tok string) error {
		if step == 0 {
			ev.itemID = newUUID()
			if err := ev.send("response.output_item.added", &itemEvent{Type: "response.output_item.added",
				Item: respMessage{ID: ev.itemID, Content: []respOutputText{}, Role: "assistant", Status: "in_progress", Type: "message"}}); err != nil {
				return err
			}
			if err := ev.send("response.content_part.added", &partEvent{Type: "response.content_part.added",
				ContentIndex: ev.content, ItemID: ev.itemID,
				Part: respOutputText{Annotations: []struct{}{}, Type: "output_text", Logprobs: json.RawMessage("[]")}}); err != nil {
				return err
			}
			ev.content++
		}
		ev.text.WriteString(tok)
		err := ev.send("response.output_text.delta", &textDeltaEvent{Type: "response.output_text.delta",
			ContentIndex: ev.content, Delta: tok, ItemID: ev.itemID, Logprobs: []struct{}{}})
		ev.content++
		return err
	})
	if err != nil {
		return err
	}
	text := ev.text.String()
	if err := ev.send("response.output_text.done", &textDoneEvent{Type: "response.output_text.done",
		ContentIndex: ev.content, ItemID: ev.itemID, Logprobs: []struct{}{}, Text: text}); err != nil {
		return j.fail(ctx, errClientGone, "write")
	}
	ev.content++
	part := respOutputText{Annotations: []struct{}{}, Text: text, Type: "output_text", Logprobs: jsonNull}
	if err := ev.send("response.content_part.done", &partEvent{Type: "response.content_part.done",
		ContentIndex: ev.content, ItemID: ev.itemID, Part: part}); err != nil {
		return j.fail(ctx, errClientGone, "write")
	}
	ev.content++
	if err := ev.send("response.output_item.done", &itemEvent{Type: "response.output_item.done",
		Item: respMessage{ID: ev.itemID, Content: []respOutputText{part}, Role: "assistant", Status: "completed",
			Type: "message", Summary: &[]struct{}{}}}); err != nil {
		return j.fail(ctx, errClientGone, "write")
	}
	return nil
}

func (ev *respEvents) completed(final *responseObject) error {
	return ev.send("response.completed", &responseStateEvent{Response: final, Type: "response.completed"})
}

// newUUID is a random UUID in its dashed form (the item id of vLLM's simple
// stream).
func newUUID() string {
	h := randomID()
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
