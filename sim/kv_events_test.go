package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/openai/openai-go/v3"
	"github.com/vmihailenco/msgpack/v5"
)

// kvSub is a real ZeroMQ consumer of a simulator's KV events: a SUB socket
// on its PUB endpoint and a DEALER on its replay endpoint, as vLLM's example
// subscriber uses them.
type kvSub struct {
	t      *testing.T
	sub    zmq4.Socket
	dealer zmq4.Socket
	topic  string
	msgs   chan zmq4.Msg
}

// newKVSub connects to e's KV events and waits until the publisher has the
// subscription (a PUB drops what it sends before that).
func newKVSub(t *testing.T, e *testEnv, topic string) *kvSub {
	t.Helper()
	if err := e.sim.StartKVEvents(); err != nil {
		t.Fatal(err)
	}
	pubEP, replayEP := e.sim.KVEventsEndpoints()
	ctx, cancel := context.WithCancel(context.Background())
	k := &kvSub{t: t, sub: zmq4.NewSub(ctx), dealer: zmq4.NewDealer(ctx), topic: topic, msgs: make(chan zmq4.Msg, 64)}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		_ = k.sub.Close()
		_ = k.dealer.Close()
		<-done
	})
	if err := k.sub.Dial(pubEP); err != nil {
		t.Fatal(err)
	}
	if err := k.sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		t.Fatal(err)
	}
	if replayEP != "" {
		if err := k.dealer.Dial(replayEP); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		defer close(done)
		for {
			m, err := k.sub.Recv()
			if err != nil {
				return
			}
			k.msgs <- m
		}
	}()
	pub := e.sim.kv.pub.(zmq4.Topics)
	eventually(t, "the subscription to reach the publisher", func() bool { return slices.Contains(pub.Topics(), topic) })
	return k
}

// next returns the next message's seq and payload.
func (k *kvSub) next() (uint64, []byte) {
	k.t.Helper()
	select {
	case m := <-k.msgs:
		if len(m.Frames) != 3 || string(m.Frames[0]) != k.topic || len(m.Frames[1]) != 8 {
			k.t.Fatalf("message frames %q, want [topic, 8-byte seq, payload]", m.Frames)
		}
		return binary.BigEndian.Uint64(m.Frames[1]), m.Frames[2]
	case <-time.After(30 * time.Second):
		k.t.Fatal("no KV event batch within 30 s")
	}
	return 0, nil
}

// replay asks for the batches from start on and returns them up to the end
// marker, which it checks.
func (k *kvSub) replay(start uint64) (seqs []int64, payloads [][]byte) {
	k.t.Helper()
	if err := k.dealer.SendMulti(zmq4.NewMsgFrom(nil, binary.BigEndian.AppendUint64(nil, start))); err != nil {
		k.t.Fatal(err)
	}
	for {
		m, err := k.dealer.Recv()
		if err != nil {
			k.t.Fatal(err)
		}
		if len(m.Frames) != 3 || len(m.Frames[0]) != 0 || len(m.Frames[1]) != 8 {
			k.t.Fatalf("replay frames %q, want [\"\", seq, payload]", m.Frames)
		}
		seq := int64(binary.BigEndian.Uint64(m.Frames[1]))
		if seq == -1 {
			if len(m.Frames[2]) != 0 {
				k.t.Fatalf("end marker with payload %q", m.Frames[2])
			}
			return seqs, payloads
		}
		seqs, payloads = append(seqs, seq), append(payloads, m.Frames[2])
	}
}

// decodeGeneric decodes a payload with a general-purpose msgpack decoder.
func decodeGeneric(t *testing.T, payload []byte) any {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(payload, &v); err != nil {
		t.Fatalf("msgpack: %v", err)
	}
	return v
}

func asInt(t *testing.T, v any) int64 {
	t.Helper()
	switch n := v.(type) {
	case int8:
		return int64(n)
	case int16:
		return int64(n)
	case int32:
		return int64(n)
	case int64:
		return n
	case uint8:
		return int64(n)
	case uint16:
		return int64(n)
	case uint32:
		return int64(n)
	case uint64:
		return int64(n)
	}
	t.Fatalf("%#v is not an integer", v)
	return 0
}

func asInts(t *testing.T, v any) []int {
	t.Helper()
	var out []int
	for _, x := range v.([]any) {
		out = append(out, int(asInt(t, x)))
	}
	return out
}

func seqIDs(from, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(from + i)
	}
	return out
}

func completeIDs(t *testing.T, e *testEnv, model string, ids []int64) *openai.Completion {
	t.Helper()
	c := e.openai("")
	r, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(model), Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids},
		MaxTokens: openai.Int(1)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func toInts(ids []int64) []int {
	out := make([]int, len(ids))
	for i, v := range ids {
		out[i] = int(v)
	}
	return out
}

// TestKVEventsMapEncoding runs a simulator whose KV capacity is 4 blocks
// and follows its events over real ZeroMQ sockets, decoded by a generic
// msgpack decoder: a prompt's full blocks stored (map form, 32-byte
// hashes), evicted by another prompt (one BlockRemoved per block, tail
// first, in the batch that stores the new blocks), replay from a given seq
// up to the end marker, and a reset publishing AllBlocksCleared.
func TestKVEventsMapEncoding(t *testing.T) {
	e := newEnv(t, Config{PrefixCaching: true, KVTokens: 64, OutputTokens: 1,
		KVEvents: &KVEventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv-events"}})
	k := newKVSub(t, e, "kv-events")

	a := seqIDs(1, 50) // 3 full blocks and 2 tokens
	completeIDs(t, e, "demo", a)
	seq0, p0 := k.next()
	batch := decodeGeneric(t, p0).(map[string]any)
	if seq0 != 0 || len(batch) != 3 || asInt(t, batch["data_parallel_rank"]) != 0 {
		t.Fatalf("batch %d: %v", seq0, batch)
	}
	if _, ok := batch["ts"].(float64); !ok {
		t.Errorf("ts %#v, want a float", batch["ts"])
	}
	evs := batch["events"].([]any)
	if len(evs) != 1 {
		t.Fatalf("events %v, want one BlockStored", evs)
	}
	stored := evs[0].(map[string]any)
	var hashesA [][]byte
	for _, h := range stored["block_hashes"].([]any) {
		hashesA = append(hashesA, h.([]byte))
	}
	if stored["type"] != "BlockStored" || len(hashesA) != 3 || len(hashesA[0]) != 32 || stored["parent_block_hash"] != nil ||
		!slices.Equal(asInts(t, stored["token_ids"]), toInts(a[:48])) || asInt(t, stored["block_size"]) != 16 ||
		stored["lora_id"] != nil || stored["medium"] != "GPU" || stored["lora_name"] != nil || len(stored) != 8 {
		t.Fatalf("BlockStored = %v", stored)
	}

	b := seqIDs(1001, 50)
	completeIDs(t, e, "demo", b)
	seq1, p1 := k.next()
	evs = decodeGeneric(t, p1).(map[string]any)["events"].([]any)
	if seq1 != 1 || len(evs) != 4 {
		t.Fatalf("batch %d: %v, want three removals and a store", seq1, evs)
	}
	for i, want := range [][]byte{hashesA[2], hashesA[1], hashesA[0]} {
		ev := evs[i].(map[string]any)
		hs := ev["block_hashes"].([]any)
		if ev["type"] != "BlockRemoved" || len(hs) != 1 || !bytes.Equal(hs[0].([]byte), want) || ev["medium"] != "GPU" || len(ev) != 3 {
			t.Errorf("event %d = %v, want BlockRemoved of %x", i, ev, want)
		}
	}
	if ev := evs[3].(map[string]any); ev["type"] != "BlockStored" || !slices.Equal(asInts(t, ev["token_ids"]), toInts(b[:48])) {
		t.Errorf("event 3 = %v, want BlockStored of the second prompt", ev)
	}

	seqs, payloads := k.replay(0)
	if !slices.Equal(seqs, []int64{0, 1}) || !bytes.Equal(payloads[0], p0) || !bytes.Equal(payloads[1], p1) {
		t.Errorf("replay from 0: seqs %v", seqs)
	}
	if seqs, payloads = k.replay(1); !slices.Equal(seqs, []int64{1}) || !bytes.Equal(payloads[0], p1) {
		t.Errorf("replay from 1: seqs %v", seqs)
	}
	if seqs, _ = k.replay(2); len(seqs) != 0 {
		t.Errorf("replay from 2: seqs %v, want none", seqs)
	}

	if code, _, body := e.post("/reset_prefix_cache", ""); code != http.StatusOK || len(body) != 0 {
		t.Fatalf("reset: %d %s", code, body)
	}
	seq2, p2 := k.next()
	evs = decodeGeneric(t, p2).(map[string]any)["events"].([]any)
	if ev := evs[0].(map[string]any); seq2 != 2 || len(evs) != 1 || ev["type"] != "AllBlocksCleared" || len(ev) != 1 {
		t.Errorf("batch %d: %v, want AllBlocksCleared", seq2, evs)
	}
	if n := e.sim.PrefixCacheBlocks(); n != 0 {
		t.Errorf("%d blocks after reset", n)
	}
}

// TestKVEventsArrayEncodingIntHashes: the array_like form with integer
// hashes, a LoRA adapter's blocks (lora_id, lora_name) and a prefix hit
// whose new block names its parent by the hash the first store gave.
func TestKVEventsArrayEncodingIntHashes(t *testing.T) {
	e := newEnv(t, Config{PrefixCaching: true, PromptTokensDetails: true, OutputTokens: 1,
		LoRAModules: []LoRAModule{{Name: "adapter", Path: "/adapters/a"}},
		KVEvents:    &KVEventsConfig{Endpoint: "tcp://*:0", Encoding: "array", Hash: "int", DataParallelRank: 2}})
	k := newKVSub(t, e, "")
	if _, replay := e.sim.KVEventsEndpoints(); replay != "" {
		t.Errorf("replay endpoint %q without ReplayEndpoint", replay)
	}

	ids := seqIDs(7, 60)
	completeIDs(t, e, "adapter", ids[:40]) // 2 full blocks
	_, p0 := k.next()
	batch := decodeGeneric(t, p0).([]any)
	if len(batch) != 3 || asInt(t, batch[2]) != 2 {
		t.Fatalf("batch %v, want [ts, events, 2]", batch)
	}
	ev := batch[1].([]any)[0].([]any)
	if len(ev) != 8 || ev[0] != "BlockStored" || len(ev[1].([]any)) != 2 || ev[2] != nil ||
		!slices.Equal(asInts(t, ev[3]), toInts(ids[:32])) || asInt(t, ev[4]) != 16 || asInt(t, ev[5]) != 1 ||
		ev[6] != "GPU" || ev[7] != "adapter" {
		t.Fatalf("BlockStored = %v", ev)
	}
	second := ev[1].([]any)[1]
	if _, ok := second.(uint64); !ok && fmt.Sprint(second) == "" {
		t.Errorf("hash %#v, want an integer", second)
	}
	asInt(t, second)

	r := completeIDs(t, e, "adapter", ids) // hits both blocks, stores the third
	if r.Usage.PromptTokensDetails.CachedTokens != 32 {
		t.Errorf("cached_tokens %d, want 32", r.Usage.PromptTokensDetails.CachedTokens)
	}
	_, p1 := k.next()
	ev = decodeGeneric(t, p1).([]any)[1].([]any)[0].([]any)
	if ev[0] != "BlockStored" || len(ev[1].([]any)) != 1 || asInt(t, ev[2]) != asInt(t, second) ||
		!slices.Equal(asInts(t, ev[3]), toInts(ids[32:48])) {
		t.Errorf("BlockStored = %v, want the third block with parent %v", ev, second)
	}
}
