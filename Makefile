# maitred. `make test` is the one command CI runs (.ci/run): it fetches the
# tokenizer fixtures, vets, runs every test with the race detector, then runs
# each fuzz target briefly.
GO       ?= go
FUZZTIME ?= 4s

.PHONY: test fixtures vet unit fuzz bench build demo docker

test: fixtures vet unit fuzz

fixtures:
	bash scripts/fetch-fixtures.sh

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

# pkg:FuzzTarget[:time] entries. Each runs alone: go test -fuzz takes one
# target. FuzzCountChat loads four real tokenizers in every fuzz worker
# before it can start, so it gets longer than the rest.
FUZZ_TARGETS := \
	./internal/ojson:FuzzParse \
	./fleet:FuzzParse \
	./gateway:FuzzStreamGuard \
	./admission:FuzzDoor \
	./tokenize:FuzzPretokenize \
	./tokenize:FuzzBPE \
	./tokenize:FuzzRewriteConcat \
	./tokenize:FuzzCountChat:30s

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; fn=$${rest%%:*}; ft=$(FUZZTIME); \
		case $$rest in *:*) ft=$${rest#*:};; esac; \
		echo "fuzz $$pkg $$fn ($$ft)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $$ft -fuzzminimizetime 2s $$pkg; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/maitred ./cmd/maitred

demo:
	$(GO) run ./cmd/maitred demo

docker:
	docker build -t maitred:dev .
