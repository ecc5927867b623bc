# fijit — build, test and install.
#   make            library (static + shared), CLI, tests
#   make run        install deps, build, prewarm the default set, stats, GPU demo
#   make test       CPU test suite (plain, then ASan/UBSan, then TSan on the concurrent parts)
#   make test-sweep every accepted kernel tuple compiled for every arch (make test: a covering subset)
#   make bench      JIT benchmark (CPU side)
#   make gpu-check  GPU tests and benchmarks (run on a machine with a GPU)
#   make install PREFIX=/usr/local
CUDA_HOME ?= /usr/local/cuda
PREFIX    ?= /usr/local
CC        ?= cc
# The version is written once, in include/fijit.h (FIJIT_VERSION_MAJOR/MINOR/PATCH).
VERSION   := $(shell sed -n 's/^\#define FIJIT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9][0-9]*\)$$/\2/p' \
               include/fijit.h | paste -sd. -)
SONAME    := libfijit.so.0

WARN      := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-missing-field-initializers
CPPFLAGS  += -D_GNU_SOURCE -DFIJIT_BUILDING -Iinclude -Isrc -Itemplates -Ibuild/gen -I$(CUDA_HOME)/include
CFLAGS    ?= -O2 -g
CFLAGS    += -std=c11 -fPIC -fvisibility=hidden $(WARN)
# hiredis, libcurl and libsodium (the fleet tier) are opened at run time, not linked
# (src/common/dynlib.h); test_remote_redis talks to its server through hiredis
# directly too.
LDLIBS    := -lsqlite3 -lxxhash -ldl -lpthread -lm
TEST_LDLIBS := $(LDLIBS) -lhiredis
# The CLI is a client of the public headers only (include/): no -Isrc, no cuda.h.
TOOL_CPPFLAGS := -D_GNU_SOURCE -Iinclude

B         := build
LIB_SRC   := $(sort $(wildcard src/*/*.c src/*/*/*.c))
LIB_HDR   := $(wildcard include/*.h src/*/*.h src/*/*/*.h)
CLI_SRC   := $(sort $(wildcard tools/*.c))
TEST_SRC  := $(sort $(wildcard tests/test_*.c))
# Every file under templates/, folders included; embedded under its path relative
# to templates/ ("decode/params.h"), the name templates and -Itemplates use.
TEMPLATES := $(sort $(shell find templates -type f ! -name '.*'))
TEMPLATE_HDR := $(filter %.h,$(TEMPLATES))

.PHONY: test-layering all run test test-sweep test-plain test-asan test-tsan test-cli test-install test-api test-fuzz test-python fuzz bench gpu-check install clean deps
all: $(B)/libfijit.a $(B)/libfijit.so $(B)/fijit $(TEST_SRC:tests/%.c=$(B)/tests/%) $(B)/bench_jit

# Debian packages the build needs (CUDA toolkit itself comes from NVIDIA's installer).
deps:
	@missing=""; for p in libsqlite3-dev libxxhash-dev libhiredis-dev libsodium-dev redis-server \
	  libcurl4-openssl-dev nginx-light openssl \
	  pkg-config clang libclang-rt-14-dev python3-venv; do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then apt-get update -qq && apt-get install -y -qq $$missing; fi

$(B)/gen/embedded.c: tools/embed/embed.c src/store/local/schema.sql $(TEMPLATES)
	@mkdir -p $(B)/gen
	$(CC) -O1 -o $(B)/gen/embed tools/embed/embed.c
	$(B)/gen/embed $@ --schema src/store/local/schema.sql --root templates $(TEMPLATES)

# One build flavour per directory: $(B) plain, $(B)/asan, $(B)/tsan.
define flavour
$(1)/obj/%.o: src/%.c $(LIB_HDR) $(TEMPLATE_HDR) | $(B)/gen/embedded.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CPPFLAGS) $$(CFLAGS) $(2) -c $$< -o $$@
$(1)/obj/embedded.o: $(B)/gen/embedded.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CPPFLAGS) $$(CFLAGS) $(2) -c $$< -o $$@
$(1)/obj/tools/%.o: tools/%.c $(wildcard include/*.h) $(wildcard tools/*.h)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(TOOL_CPPFLAGS) $$(CFLAGS) $(2) -c $$< -o $$@
$(1)/obj/tests/%.o: tests/%.c tests/check.h tests/cover.h $(LIB_HDR) \
                   $(TEMPLATE_HDR)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CPPFLAGS) $$(CFLAGS) $(2) -c $$< -o $$@
$(1)/libfijit.a: $(LIB_SRC:src/%.c=$(1)/obj/%.o) $(1)/obj/embedded.o
	rm -f $$@ && ar rcs $$@ $$^
$(1)/fijit: $(CLI_SRC:tools/%.c=$(1)/obj/tools/%.o) $(1)/libfijit.a
	$$(CC) $(2) -o $$@ $$^ $$(LDLIBS)
$(1)/tests/%: $(1)/obj/tests/%.o $(1)/obj/tests/check.o $(1)/obj/tests/cover.o $(1)/libfijit.a
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) -o $$@ $$^ $$(TEST_LDLIBS)
# The fake CUDA driver test_launch, test_multi_context and
# test_batch_decode_compile (its plans load their kernel) load from their own
# directory (plain build: it runs inside sanitized processes without being
# instrumented itself).
$(1)/tests/libcuda.so.1: tests/fake_cuda.c tests/fake_cuda.h
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CPPFLAGS) $$(CFLAGS) -shared -Wl,-soname,libcuda.so.1 -o $$@ $$< -lpthread
$(1)/tests/test_launch $(1)/tests/test_multi_context $(1)/tests/test_batch_decode_compile \
  $(1)/tests/test_mla_decode $(1)/tests/test_cold_build: | $(1)/tests/libcuda.so.1
# The same fake as a driver before CUDA 12 (no context-independent loading),
# which test_load runs itself again on (FIJIT_TEST_FAKE_CUDA).
$(1)/tests/cuda11/libcuda.so.1: tests/fake_cuda.c tests/fake_cuda.h
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CPPFLAGS) $$(CFLAGS) -DFAKE_CUDA_NO_LIBRARIES -shared -Wl,-soname,libcuda.so.1 -o $$@ $$< -lpthread
$(1)/tests/test_load: | $(1)/tests/libcuda.so.1 $(1)/tests/cuda11/libcuda.so.1
endef

SAN_ASAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_TSAN := -fsanitize=thread
$(eval $(call flavour,$(B),))
$(eval $(call flavour,$(B)/asan,$(SAN_ASAN)))
$(eval $(call flavour,$(B)/tsan,$(SAN_TSAN)))

$(B)/libfijit.so: $(LIB_SRC:src/%.c=$(B)/obj/%.o) $(B)/obj/embedded.o
	$(CC) -shared -Wl,-soname,$(SONAME) -o $(B)/libfijit.so.$(VERSION) $^ $(LDLIBS)
	ln -sf libfijit.so.$(VERSION) $(B)/$(SONAME)
	ln -sf $(SONAME) $@

# The main job: prewarm the default decode set into the default cache, show
# the statistics, and on a machine with a GPU launch one kernel and check it.
DEFAULT_SET := --kernel decode --dtype fp16,bf16 --head-dim 64,128,256 --mask none,window \
               --pos none,rope,alibi
run: deps
	$(MAKE) -j2 all
	$(B)/fijit prewarm $(DEFAULT_SET)
	$(B)/fijit stats
	$(B)/fijit demo

# The suite CI runs. FIJIT_TEST_JOBS bounds parallel compiles in the tests.
# The plain suite first: its NVRTC sweeps keep both cores busy. The others are
# mostly one thread each (the fuzz run is timed, not CPU-bound), so they run two
# at a time, each one's output kept together. Every suite and test prints its
# seconds, to see where CI time goes.
TEST_PARALLEL := test-asan test-tsan test-cli test-install test-api test-fuzz test-python test-worklog test-layering
test: test-plain
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(TEST_PARALLEL)
	@echo "make test: all suites passed"

# Runs a command and prints its wall time: $(call timed,NAME,COMMAND).
timed = s=$$(date +%s); $(2) || exit $$?; echo "-- $(1): $$(( $$(date +%s) - s )) s"

# Suites that compile the same kernels over and over (test_faults at each
# fault point, test_launch in each case) load NVRTC through
# tests/nvrtc_memo.c, which compiles each distinct input once per process.
# Not the others: the kill and crowd tests in test_robust need compiles that
# take their real time. $(call memo_env,TEST) is the environment for TEST.
NVRTC_MEMO := $(B)/tests/memo/libnvrtc.so.13
MEMO_TESTS := test_faults test_launch
memo_env = $$(case " $(MEMO_TESTS) " in *" $$(basename $(1)) "*) \
  echo LD_LIBRARY_PATH=$(abspath $(dir $(NVRTC_MEMO)))$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH};; esac)
$(NVRTC_MEMO): tests/nvrtc_memo.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -shared -o $@ $< -lxxhash -ldl -lpthread

test-plain: all $(NVRTC_MEMO)
	@set -e; for t in $(TEST_SRC:tests/%.c=$(B)/tests/%); do echo "== $$t"; \
	  $(call timed,$$t,env $(call memo_env,$$t) $$t); done

# Sanitizer runs compile fewer tuples (FIJIT_TEST_QUICK: each field value once): it is NVRTC's code, not ours.
test-asan: $(TEST_SRC:tests/%.c=$(B)/asan/tests/%) $(NVRTC_MEMO)
	@set -e; for t in $(filter-out $(NVRTC_MEMO),$^); do echo "== $$t"; $(call timed,$$t,env $(call memo_env,$$t) FIJIT_TEST_QUICK=1 \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 LSAN_OPTIONS=suppressions=tests/lsan.supp \
	  bash tests/run_sanitized.sh $$t); done

# TSan covers the concurrent parts: the in-process table and single flight,
# threads driving two (fake) devices at once, threads sharing one remote
# tier (connection pool, lease renewals), and a prefill tuple's parts built
# on threads of their own.
TSAN_ENV := FIJIT_TEST_QUICK=1 TSAN_OPTIONS=halt_on_error=1:suppressions=tests/tsan.supp
test-tsan: $(B)/tsan/tests/test_concurrency $(B)/tsan/tests/test_multi_context $(B)/tsan/tests/test_remote_redis \
           $(B)/tsan/tests/test_remote_http $(B)/tsan/tests/test_cold_build
	@set -e; for t in $(B)/tsan/tests/test_concurrency $(B)/tsan/tests/test_multi_context \
	  $(B)/tsan/tests/test_cold_build; do \
	  echo "== $$t"; $(call timed,$$t,$(TSAN_ENV) $$t); done
	@echo "== $(B)/tsan/tests/test_remote_redis redis_threads"; \
	  $(call timed,test_remote_redis redis_threads,$(TSAN_ENV) $(B)/tsan/tests/test_remote_redis redis_threads)
	@echo "== $(B)/tsan/tests/test_remote_http http_threads"; \
	  $(call timed,test_remote_http http_threads,$(TSAN_ENV) $(B)/tsan/tests/test_remote_http http_threads)

# The compile tests take a covering subset of the kernel tuples in `make test`
# (tests/cover.h: per arch, every pair of field values some accepted tuple has;
# FIJIT_TEST_QUICK: every value once); the full sweep compiles every accepted
# tuple for every arch they name.
SWEEP_TESTS := test_prefill_compile test_batch_decode_compile
test-sweep: $(SWEEP_TESTS:%=$(B)/tests/%)
	@set -e; for t in $^; do echo "== $$t"; \
	  $(call timed,$$t,FIJIT_TEST_SWEEP=1 $$t _compile_for_every_arch); done

test-cli: $(B)/fijit
	@$(call timed,test-cli,bash tests/cli/run.sh $(B)/fijit)

$(B)/bench_jit: $(B)/obj/tests/bench_jit.o $(B)/libfijit.a
	$(CC) -o $@ $^ $(LDLIBS)

# Per-context load time and memory, one library vs a module per context
# (bench/bench_load.c; scripts/gpu/run.sh's jit part runs it on the GPU). Here,
# without a GPU, it runs on the fake driver: that it works, not what it measures.
$(B)/bench_load: bench/bench_load.c include/fijit.h include/fijit_cache.h $(B)/libfijit.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ bench/bench_load.c $(B)/libfijit.a $(LDLIBS)
all: $(B)/bench_load
.PHONY: bench-load
bench-load: $(B)/bench_load $(B)/tests/libcuda.so.1
	@if [ -e /dev/nvidia0 ]; then $(B)/bench_load; else d=$$(mktemp -d) && \
	  FIJIT_CACHE_DIR=$$d LD_LIBRARY_PATH=$(B)/tests $(B)/bench_load --spec "decode q=fp16 hd=64" \
	    --rounds 1; rc=$$?; rm -rf $$d; exit $$rc; fi

# libFuzzer targets (fuzz/): a short run in `make test`, a long one with `make fuzz`.
test-fuzz: $(B)/gen/embedded.c
	@$(call timed,test-fuzz,bash fuzz/run.sh 15)

fuzz: $(B)/gen/embedded.c
	bash fuzz/run.sh 300

# A host program that uses every public function and *_INIT macro, built as
# C11 and as C++17 under -Wall -Wextra -Werror -pedantic against the shared
# library, then run (it needs no GPU).
API_WARN := -Wall -Wextra -Werror -pedantic -Iinclude
$(B)/tests/api/use_all_c: tests/api/use_all.c include/*.h $(B)/libfijit.so
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(API_WARN) -o $@ $< -L$(B) -lfijit -Wl,-rpath,$(abspath $(B))
$(B)/tests/api/use_all_cxx: tests/api/use_all.c include/*.h $(B)/libfijit.so
	@mkdir -p $(dir $@)
	$(CXX) -x c++ -std=c++17 $(API_WARN) -o $@ $< -L$(B) -lfijit -Wl,-rpath,$(abspath $(B))

test-api: $(B)/tests/api/use_all_c $(B)/tests/api/use_all_cxx
	@set -e; for t in $^; do echo "== $$t"; FIJIT_CACHE_DIR=/nonexistent $$t; done

# The Python package (python/): layouts vs the headers, discovery, errors, prewarm,
# python -m fijit, an offline pip install into a venv; and the bench tools the GPU
# runs' reports rest on (ws_resources.py, causal_tile_use.py). No GPU or torch needed.
# No call circle between src/'s folders, read from the built objects' symbols
# (tests/layering_check.py; --self-test shows it finds one).
LIB_OBJ := $(LIB_SRC:src/%.c=$(B)/obj/%.o)
test-layering: $(LIB_OBJ)
	@echo "== layering"; python3 tests/layering_check.py --self-test && \
	  python3 tests/layering_check.py $(B)/obj $(LIB_OBJ)

test-python: $(B)/libfijit.so $(B)/fijit $(B)/tests/libcuda.so.1
	@echo "== python package"; python3 tests/python/test_package.py $(B)
	@echo "== python tensor paths (stand-ins of torch and transformers, fake driver)"; python3 tests/python/test_padded.py $(B)
	@echo "== bench tools"; PYTHONPATH=bench python3 tests/python/test_bench_tools.py

test-install: all
	@echo "== install check"; $(call timed,test-install,bash tests/install_check.sh)

# The repository's text: no work-log wording, no paths to files that do not
# exist, a README of at most 25 KB whose quick start is examples/quickstart.c,
# no link between the documents that leads nowhere.
.PHONY: test-worklog
test-worklog:
	@echo "== work-log check"; bash tests/worklog_check.sh

bench: $(B)/bench_jit $(B)/fijit
	$(B)/bench_jit
	bash bench/bench_prewarm.sh $(B)/fijit

# Cold builds from an empty cache, side by side with an older build of the
# library: make bench-cold BASELINE=/tmp/old/libfijit.so [BENCH_COLD_FLAGS="--reps 7 --sweep"]
.PHONY: bench-cold
$(B)/bench_cold: bench/bench_cold.c include/fijit.h
	$(CC) $(TOOL_CPPFLAGS) $(CFLAGS) -o $@ $< -ldl -lpthread
bench-cold: $(B)/bench_cold $(B)/libfijit.so
	$(B)/bench_cold $(if $(BASELINE),--baseline $(BASELINE)) $(BENCH_COLD_FLAGS) $(B)/libfijit.so

gpu-check: all
	bash scripts/gpu/run.sh

install: $(B)/libfijit.a $(B)/libfijit.so $(B)/fijit
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/fijit.h include/fijit_batch_decode.h include/fijit_prefill.h \
	  include/fijit_cache.h include/fijit_mla.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(B)/libfijit.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(B)/libfijit.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libfijit.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libfijit.so
	install -m 755 $(B)/fijit $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
	  fijit.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/fijit.pc

clean:
	rm -rf $(B)
