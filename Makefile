# FTS5 is compiled into mattn/go-sqlite3 only with this tag; every go command
# here gets it through GOFLAGS.
export GOFLAGS := -tags=sqlite_fts5
export CGO_ENABLED := 1

BIN := bin/bot

.PHONY: run build test check generate bench fuzz

run: build
	./$(BIN) serve

build:
	@test -x $(BIN) || echo "building $(BIN): the first build compiles SQLite and every dependency (about 4 minutes on a cold cache)"
	go build -o $(BIN) ./cmd/bot

# test runs the source checks, then every test with the race detector. go test
# prints nothing of a passing package, so a suite that skips for a missing tool
# (the browser tests without Chromium) writes one line to $(TEST_NOTES), printed
# after the results.
TEST_NOTES := $(CURDIR)/.test-notes
test: check
	@rm -f "$(TEST_NOTES)"
	@echo "go test -race -count=1 ./..."
	@HOLDFAST_TEST_NOTES="$(TEST_NOTES)" go test -race -count=1 ./...; rc=$$?; \
	  if [ -s "$(TEST_NOTES)" ]; then cat "$(TEST_NOTES)"; fi; rm -f "$(TEST_NOTES)"; exit $$rc

# check fails on unformatted code, vet findings or stale templ output.
check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_templ.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	@if git ls-files '*.templ' | grep -q .; then \
	  go tool templ generate -log-level warn >/dev/null && \
	  git diff --exit-code -- '*_templ.go' || { echo "templ output is stale: run 'make generate' and commit"; exit 1; }; \
	fi

generate:
	go tool templ generate

bench:
	go test -run='^$$' -bench=. -benchmem -count=1 ./...

FUZZTIME ?= 30s
fuzz:
	go test -run='^$$' -fuzz=FuzzCompile -fuzztime=$(FUZZTIME) ./engine/workflow
	go test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./engine/search
	go test -run='^$$' -fuzz=FuzzRender -fuzztime=$(FUZZTIME) ./bridge/mrkdwn
	go test -run='^$$' -fuzz=FuzzSplit -fuzztime=$(FUZZTIME) ./bridge/mrkdwn
	go test -run='^$$' -fuzz=FuzzParseEvent -fuzztime=$(FUZZTIME) ./bridge
	go test -run='^$$' -fuzz=FuzzParseInteraction -fuzztime=$(FUZZTIME) ./bridge
