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

# pkg:FuzzTarget pairs. Each runs alone: go test -fuzz takes one target.
FUZZ_TARGETS := \
	./internal/ojson:FuzzParse \
	./fleet:FuzzParse \
	./gateway:FuzzStreamGuard \
	./admission:FuzzDoor \
	./tokenize:FuzzPretokenize \
	./tokenize:FuzzBPE \
	./tokenize:FuzzCountChat

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/maitred ./cmd/maitred

demo:
	$(GO) run ./cmd/maitred demo

docker:
	docker build -t maitred:dev .
