# The two commands of the README (`make run`, `make test`) and the development targets.
# Every target does its own setup on a fresh Debian 12 machine (scripts/setup is idempotent).
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_PROMPT_SECONDS ?= 30
CMAKE_FLAGS ?=

.PHONY: all setup build run replay test unit-asan unit-tsan fuzz-smoke bench format format-check clean

all: build

setup:
	@bash scripts/setup

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)

# The gateway with four simulated engines in-process, until Ctrl-C.
run: build
	@bash scripts/demo $(BUILD)/kvgate

# The routing-quality report: every policy replays the Mooncake trace on simulated engines.
replay: build
	@TRACE="$(TRACE)" bash scripts/replay-demo $(BUILD)/kvgate

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j2
	@$(MAKE) --no-print-directory unit-asan unit-tsan fuzz-smoke format-check

# Every test again, unit and integration, with the binaries built under AddressSanitizer +
# UndefinedBehaviorSanitizer.
unit-asan: setup
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVGATE_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) --target kvgate_unit_tests kvgate
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j2

# The unit tests (the index's readers against its writer, the event streams, the gateway's
# pieces) with ThreadSanitizer: any data race fails the run.
unit-tsan: setup
	@cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVGATE_TSAN=ON >/dev/null
	@cmake --build $(TSAN_BUILD) --target kvgate_unit_tests
	ctest --test-dir $(TSAN_BUILD) -L unit --output-on-failure -j2

# Builds the libFuzzer targets with clang-14 and runs each briefly under ASan: the event
# decoder, and the prompt of arbitrary requests (chat template and tokenizer).
fuzz-smoke: setup
	@CXX=clang++-14 cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVGATE_FUZZ=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) --target fuzz_decode fuzz_prompt
	@for t in decode:$(FUZZ_SECONDS) prompt:$(FUZZ_PROMPT_SECONDS); do \
	  name=$${t%%:*}; secs=$${t##*:}; mkdir -p $(FUZZ_BUILD)/corpus-$$name; \
	  echo "fuzz_$$name: $$secs s under ASan"; \
	  $(FUZZ_BUILD)/fuzz/fuzz_$$name -max_total_time=$$secs $(FUZZ_BUILD)/corpus-$$name \
	    fuzz/corpus/$$name > $(FUZZ_BUILD)/fuzz-$$name.log 2>&1 \
	    || { tail -n 60 $(FUZZ_BUILD)/fuzz-$$name.log; echo "fuzz_$$name FAILED"; exit 1; }; \
	  grep -E "^Done [0-9]+ runs" $(FUZZ_BUILD)/fuzz-$$name.log; \
	done

bench: build
	$(BUILD)/bench/decode_bench
	$(BUILD)/bench/index_bench
	$(BUILD)/bench/tokenizer_bench
	$(BUILD)/bench/template_bench
	$(BUILD)/bench/sse_bench
	/usr/bin/python3 bench/gateway_bench.py --kvgate $(BUILD)/kvgate

format: build
	@cmake --build $(BUILD) --target format

format-check: build
	@cmake --build $(BUILD) --target format-check

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
