# maitred. `make test` is the one command CI runs (.ci/run): it fetches the
# tokenizer fixtures and the chat-template corpus, vets, runs every test with
# the race detector, runs every benchmark once (so none rots), then runs each
# fuzz target briefly.
GO       ?= go
FUZZTIME ?=

.PHONY: test fixtures vet unit benchonce fuzz bench build demo docker

test: fixtures vet unit benchonce fuzz

fixtures:
	bash scripts/fetch-fixtures.sh

vet:
	$(GO) vet ./...

# The tokenizer's two corpus-wide checks (every golden line through every
# fixture tokenizer, every id back through the decoder) run on one
# goroutine over immutable tables: the race detector has nothing to find in
# them and slows them 5-10x, so they run once without it, in full (about
# two minutes of CI's fifteen saved). Every other test runs under -race.
SOLO_TESTS := ^(TestParityGolden|TestDecodeRoundTrip)$$

unit:
	$(GO) test -race -count=1 -timeout 30m -skip '$(SOLO_TESTS)' ./...
	$(GO) test -count=1 -timeout 10m -run '$(SOLO_TESTS)' ./tokenize

# Every benchmark, one iteration: a benchmark that no longer runs fails here
# (figures come from `make bench` and bench/, not from this). The tests
# that measure what the race detector changes (a goroutine's stack depth)
# run here too, in the same binaries built without it.
NORACE_TESTS := ^(TestOpenStreamHandlerStackIsShallow|TestWaitingHandlerParksOnSmallStack|TestTracedWaitingHandlerParksOnSmallStack)$$

benchonce:
	$(GO) test -run '$(NORACE_TESTS)' -bench . -benchtime 1x -timeout 10m ./...

# pkg:FuzzTarget:budget entries. Each runs alone: go test -fuzz takes one
# target. Budgets are execution counts (Nx), about four seconds' worth on
# CI's two cores, not durations: with a duration, Go 1.26's fuzz
# coordinator can report "context deadline exceeded" as a failure when the
# deadline lands while a worker is mid-call (golang/go#75804, fixed in
# 1.27). FUZZTIME, when set, overrides every budget (e.g. FUZZTIME=60s).
FUZZ_TARGETS := \
	./internal/ojson:FuzzParse:60000x \
	./config:FuzzParse:15000x \
	./fleet:FuzzParseMetrics:20000x \
	./gateway:FuzzStreamGuard:5000x \
	./gateway:FuzzDecodeUsage:5000x \
	./gateway:FuzzOpenAIChunk:5000x \
	./gateway:FuzzResponsesEvent:3000x \
	./gateway:FuzzAnthropicEvent:3000x \
	./gateway:FuzzUpstreamHeaderMatchesReverseProxy:5000x \
	./gateway:FuzzAnswerHeaderMatchesReverseProxy:5000x \
	./gateway:FuzzBackendURLMatchesReverseProxy:10000x \
	./internal/upstream:FuzzTransportMatchesNetHTTP:3000x \
	./internal/telemetry:FuzzEncoder:20000x \
	./admission:FuzzDoor:40000x \
	./tokenize:FuzzPretokenize:10000x \
	./tokenize:FuzzBPE:7000x \
	./tokenize:FuzzCountChat:50000x \
	./tokenize:FuzzOwnedDifferential:5000x \
	./kvevents:FuzzDecode:20000x \
	./kvevents:FuzzDecodeMatchesMsgpackLibrary:20000x

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; fn=$${rest%%:*}; ft=$${rest#*:}; \
		if [ -n "$(FUZZTIME)" ]; then ft=$(FUZZTIME); fi; \
		echo "fuzz $$pkg $$fn ($$ft)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $$ft -fuzzminimizetime 200x $$pkg; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/maitred ./cmd/maitred

demo:
	$(GO) run ./cmd/maitred demo

docker:
	docker build -t maitred:dev .
