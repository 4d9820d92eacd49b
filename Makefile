# FTS5 is compiled into mattn/go-sqlite3 only with this tag; every go command
# here gets it through GOFLAGS.
export GOFLAGS := -tags=sqlite_fts5
export CGO_ENABLED := 1

BIN := bin/bot

.PHONY: run build test test-postgres check generate bench bench-report fuzz

run: build
	./$(BIN) serve

build:
	@test -x $(BIN) || echo "building $(BIN): the first build compiles SQLite and every dependency (about 4 minutes on a cold cache)"
	go build -o $(BIN) ./cmd/bot

# test runs the source checks, then every test with the race detector. go test
# prints nothing of a passing package, so a suite that skips for a missing tool
# (the browser tests without Chromium) writes one line to $(TEST_NOTES), printed
# after the results.
#
# Then the suites that open their store through store/testdb (engine,
# bridge, API and console) run again on PostgreSQL (HOLDFAST_TEST_STORE),
# when HOLDFAST_TEST_POSTGRES names a server, and always under CI, where a
# missing server fails them.
TEST_NOTES := $(CURDIR)/.test-notes
PG_SUITES = $$(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | \
	  awk '{ for (i = 2; i <= NF; i++) if ($$i ~ /\/store\/testdb$$/) { print $$1; break } }')
test: check
	@rm -f "$(TEST_NOTES)"
	@echo "go test -race -count=1 ./..."
	@HOLDFAST_TEST_NOTES="$(TEST_NOTES)" go test -race -count=1 ./...; rc=$$?; \
	  if [ $$rc -eq 0 ] && { [ -n "$$HOLDFAST_TEST_POSTGRES" ] || [ -n "$$CI" ]; }; then \
	    pkgs="$(PG_SUITES)"; \
	    echo "HOLDFAST_TEST_STORE=postgres go test -race -count=1" $$pkgs; \
	    HOLDFAST_TEST_STORE=postgres HOLDFAST_TEST_NOTES="$(TEST_NOTES)" go test -race -count=1 $$pkgs; rc=$$?; \
	  fi; \
	  if [ -s "$(TEST_NOTES)" ]; then sort -u "$(TEST_NOTES)"; fi; rm -f "$(TEST_NOTES)"; exit $$rc

# test-postgres runs only the PostgreSQL pass of test.
test-postgres:
	HOLDFAST_TEST_STORE=postgres go test -race -count=1 $(PG_SUITES)

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

# bench-report runs the throughput and latency set docs/benchmarks.md
# reports, each at the size its figures are taken at, BENCHCOUNT times, and
# summarises the runs with benchstat (medians and their spread). The raw
# runs are kept in $(BENCH_OUT) for comparing two builds
# (go tool benchstat old.txt new.txt).
BENCHCOUNT ?= 6
BENCH_OUT ?= bench-report.txt
bench-report:
	@rm -f "$(BENCH_OUT)"
	go test -run='^$$' -bench='^(BenchmarkRunsPerSecondMinimal|BenchmarkRunsPerSecond)$$' -benchtime=5000x -count=$(BENCHCOUNT) ./engine | tee -a "$(BENCH_OUT)"
	go test -run='^$$' -bench='^BenchmarkEnqueueToStart$$' -benchtime=1000x -count=$(BENCHCOUNT) ./engine | tee -a "$(BENCH_OUT)"
	go test -run='^$$' -bench='^BenchmarkBinaryHTTPRunsPerSecond$$' -benchtime=3000x -count=$(BENCHCOUNT) ./cmd/bot | tee -a "$(BENCH_OUT)"
	go test -run='^$$' -bench='^BenchmarkHTTPEventsToInbox$$/^sync=full$$' -benchtime=12000x -count=$(BENCHCOUNT) ./bridge | tee -a "$(BENCH_OUT)"
	go tool benchstat "$(BENCH_OUT)"

FUZZTIME ?= 30s
fuzz:
	go test -run='^$$' -fuzz=FuzzCompile -fuzztime=$(FUZZTIME) ./engine/workflow
	go test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./engine/search
	go test -run='^$$' -fuzz=FuzzRender -fuzztime=$(FUZZTIME) ./bridge/mrkdwn
	go test -run='^$$' -fuzz=FuzzSplit -fuzztime=$(FUZZTIME) ./bridge/mrkdwn
	go test -run='^$$' -fuzz=FuzzParseEvent -fuzztime=$(FUZZTIME) ./bridge
	go test -run='^$$' -fuzz=FuzzParseInteraction -fuzztime=$(FUZZTIME) ./bridge
	go test -run='^$$' -fuzz=FuzzDecode -fuzztime=$(FUZZTIME) ./console/api
	go test -run='^$$' -fuzz=FuzzEmphasis -fuzztime=$(FUZZTIME) ./bridge/mrkdwn
