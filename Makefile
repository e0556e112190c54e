# pipecc: the compiler, the simulator and the runtime, plus their tests.
#   make            build bin/pipecc, bin/pipesim, bin/piperun
#   make demo       build and run the whole chain on examples/demo.pipe
#   make check      build and run every test
#   make check-torch  optional: PyTorch loads the CSVs pipecc writes (PYTHON=...)
#   make bench      benchmarks (print figures)
#   make mutate     mutation testing: bench/mutations.txt, each alone (bench/mutate.sh)
#   make SAN=1 ...  the same with ASan + UBSan, in build/san and bin/san
#   make fuzz       libFuzzer targets (clang) in bin/fuzz, each run FUZZ_SECONDS
#   make install    the 3 tools, libpipecc (include/pipecc.h, lib/, pkgconfig/pipecc.pc) and
#                   6 man pages (man1, man3, man5) under $(DESTDIR)$(PREFIX) (/usr/local)
#   make uninstall  remove exactly what install installs (same PREFIX and DESTDIR), and
#                   the folders install made, once empty
# Builds run one job a CPU unless the command line gives -j (make -j1: one at a time).
# MPI and CUDA parts are built when found (mpicc; nvcc under CUDA_HOME, and nccl.h under
# CUDA_HOME, NCCL_HOME or /usr as libnccl-dev installs it) and left out with a notice
# when not.

# One job a CPU by default: a fresh build on 2 cores takes half the time.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

CC ?= cc
PREFIX ?= /usr/local
DESTDIR ?=
VERSION := $(shell cat VERSION)
CUDA_HOME ?= /usr/local/cuda
comma := ,
NVCC ?= $(CUDA_HOME)/bin/nvcc
# NCCL beside the toolkit, else the system's (Debian/Ubuntu libnccl-dev), else set
# NCCL_HOME to a tree with include/nccl.h and lib/libnccl.so.
NCCL_HOME ?= $(firstword $(foreach d,$(CUDA_HOME) /usr,$(if $(wildcard $(d)/include/nccl.h),$(d))))
MPICC ?= mpicc

ifeq ($(FUZZ),1)
CC := clang
BUILD := build/fuzz
BIN := bin/fuzz
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
OPT := -O1
else ifeq ($(SAN),1)
BUILD := build/san
BIN := bin/san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT := -O1
else
BUILD := build/rel
BIN := bin
SANFLAGS :=
OPT := -O2
endif

# Every object is position independent (-fPIC), so that the same ones make the tools and
# libpipecc.so; -fno-semantic-interposition keeps the calls inside it direct, so the code
# is nearly what -fPIE (Debian gcc's default for the tools) makes: sim/sim.o's, read_op.o's
# and verify_ops.o's text within 0.6%.
CFLAGS := -std=c11 -Wall -Wextra -Wpedantic -Werror=implicit-function-declaration $(OPT) -g -D_GNU_SOURCE -MMD -MP $(SANFLAGS)
CFLAGS += -fPIC -fno-semantic-interposition
LDFLAGS := $(SANFLAGS)
LDLIBS := -lpthread -lm

# Dependencies: install what is missing (or say how), except for goals that need none.
ifeq ($(filter clean help uninstall,$(MAKECMDGOALS)),)
DEPS_RC := $(shell sh scripts/deps.sh $(if $(filter 1,$(FUZZ)),--fuzz) >&2; echo $$?)
ifneq ($(DEPS_RC),0)
$(error missing build dependencies (see above))
endif
endif

# BLAS: OpenBLAS's own cblas.h (Debian's reference BLAS may own the default one); only
# piperun and the tests link it.
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS := $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)

# Optional parts.
HAVE_MPI := $(if $(PIPECC_NO_MPI),,$(shell command -v $(MPICC) >/dev/null 2>&1 && echo 1))
HAVE_CUDA := $(if $(PIPECC_NO_CUDA),,$(shell test -x $(NVCC) && test -f "$(NCCL_HOME)/include/nccl.h" && echo 1))
ifeq ($(HAVE_MPI),1)
MPI_CFLAGS := $(shell $(MPICC) --showme:compile)
MPI_LIBS := $(shell $(MPICC) --showme:link)
CFLAGS += -DHAVE_MPI
endif
ifeq ($(HAVE_CUDA),1)
# A NCCL of its own tree needs its paths; the toolkit's and the system's need none.
NCCL_OWN := $(filter-out $(CUDA_HOME) /usr,$(NCCL_HOME))
NCCL_FLAGS := $(if $(NCCL_OWN),-I$(NCCL_OWN)/include)
NCCL_LIBS := $(if $(NCCL_OWN),-L$(NCCL_OWN)/lib -Wl$(comma)-rpath$(comma)$(NCCL_OWN)/lib)
CFLAGS += -DHAVE_CUDA -I$(CUDA_HOME)/include $(NCCL_FLAGS)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 $(NCCL_LIBS) -lcudart -lcublas \
	-lnccl -lstdc++
endif

# Sources: every .c of a module folder is part of its library, except the tool mains
# (*_main.c) and the optional MPI and CUDA parts (handled below).
PLAN_SRC := $(wildcard plan/*.c)
COMP_SRC := $(filter-out %_main.c,$(wildcard compiler/*.c))
SIM_SRC := $(filter-out %_main.c,$(wildcard sim/*.c))
API_SRC := $(wildcard api/*.c)
RT_MPI_ALL := runtime/launch_mpi.c runtime/comm_mpi.c
RT_SRC := $(filter-out %_main.c $(RT_MPI_ALL),$(wildcard runtime/*.c))
RT_MPI_SRC := $(if $(HAVE_MPI),$(RT_MPI_ALL))
RT_CU_SRC := $(if $(HAVE_CUDA),$(wildcard runtime/*.cu))
GRAM_C := $(BUILD)/grammar/parser.c $(BUILD)/grammar/lexer.c

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))
PLAN_OBJ := $(call obj,$(PLAN_SRC))
COMP_OBJ := $(call obj,$(COMP_SRC)) $(GRAM_C:.c=.o)
SIM_OBJ := $(call obj,$(SIM_SRC))
API_OBJ := $(call obj,$(API_SRC))
RT_OBJ := $(call obj,$(RT_SRC) $(RT_MPI_SRC)) $(patsubst %.cu,$(BUILD)/%.o,$(RT_CU_SRC))
ALL_LIBS_OBJ := $(RT_OBJ) $(API_OBJ) $(SIM_OBJ) $(COMP_OBJ) $(PLAN_OBJ)
RT_LIBS := $(MPI_LIBS) $(CUDA_LIBS)

TOOLS := $(BIN)/pipecc $(BIN)/pipesim $(BIN)/piperun
# libpipecc (include/pipecc.h, docs/api.md): the compiler, the plan and the simulator, not
# the runtime; static, and shared with only the pcc_ names exported (api/libpipecc.map).
LIB_OBJ := $(API_OBJ) $(COMP_OBJ) $(SIM_OBJ) $(PLAN_OBJ)
LIB_MAJOR := $(firstword $(subst ., ,$(VERSION)))
LIB_A := $(BUILD)/lib/libpipecc.a
LIB_SO := $(BUILD)/lib/libpipecc.so.$(VERSION)
LIB_SONAME := libpipecc.so.$(LIB_MAJOR)
LIBS := $(LIB_A) $(LIB_SO)
TEST_SRC := $(wildcard tests/test_*.c)
TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))

# The flags the objects were compiled with, kept in a file that changes only when they
# do: a change (a build from before -fPIC, say) rebuilds every object rather than
# linking old ones with new (the rule is under `all`, which stays the first goal).
FLAGS_STAMP := $(BUILD)/cflags
$(shell mkdir -p $(BUILD) && printf '%s\n' '$(CFLAGS)' | cmp -s - $(FLAGS_STAMP) || \
	printf '%s\n' '$(CFLAGS)' >$(FLAGS_STAMP))

# The tools again with every allocation of their own code through tests/failalloc/
# (PIPECC_FAIL_ALLOC=N makes the N-th fail): for tests/cli/failalloc.sh only.
FA_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup
FA_TOOLS := $(BUILD)/failalloc/pipecc $(BUILD)/failalloc/pipesim

FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZERS := $(patsubst tests/fuzz/%.c,$(BIN)/%,$(FUZZ_SRC))
FUZZ_SECONDS ?= 60

.PHONY: all demo check check-torch test bench mutate clean help notices fuzz fuzzers install uninstall
.SECONDARY: # keep the objects of test binaries (they are intermediate files)
all: notices $(TOOLS) $(LIBS)

# Every object is rebuilt when the flags change (FLAGS_STAMP).
$(ALL_LIBS_OBJ) $(call obj,$(wildcard */*_main.c)) $(TESTS:=.o): $(FLAGS_STAMP)

notices:
ifneq ($(HAVE_MPI),1)
	@echo "notice: mpicc not found: the MPI backend is left out"
endif
ifneq ($(HAVE_CUDA),1)
	@echo "notice: the CUDA backend is left out: it needs $(NVCC) and nccl.h under CUDA_HOME=$(CUDA_HOME), NCCL_HOME or /usr/include"
endif

$(BIN)/pipecc: $(BUILD)/compiler/pipecc_main.o $(COMP_OBJ) $(SIM_OBJ) $(PLAN_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/pipesim: $(BUILD)/sim/pipesim_main.o $(SIM_OBJ) $(PLAN_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/piperun: $(BUILD)/runtime/piperun_main.o $(RT_OBJ) $(PLAN_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(RT_LIBS) $(BLAS_LIBS) $(LDLIBS)

$(LIB_A): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $^

$(LIB_SO): $(LIB_OBJ) api/libpipecc.map
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(LIB_SONAME) -Wl,--version-script=api/libpipecc.map \
		-o $@ $(LIB_OBJ) $(LDLIBS)

$(BUILD)/failalloc/pipecc: $(BUILD)/compiler/pipecc_main.o $(COMP_OBJ) $(SIM_OBJ) $(PLAN_OBJ) \
		$(BUILD)/tests/failalloc/failalloc.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $(FA_WRAP) -o $@ $^ $(LDLIBS)

$(BUILD)/failalloc/pipesim: $(BUILD)/sim/pipesim_main.o $(SIM_OBJ) $(PLAN_OBJ) \
		$(BUILD)/tests/failalloc/failalloc.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $(FA_WRAP) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(ALL_LIBS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -lcmocka $(RT_LIBS) $(BLAS_LIBS) $(LDLIBS)

# test_cuda's tests that need a GPU, in a file of their own (tests/cuda_test.h).
$(BUILD)/tests/test_cuda: $(if $(HAVE_CUDA),$(BUILD)/tests/cuda_gpu.o)

$(BUILD)/grammar/parser.c: grammar/parser.y
	@mkdir -p $(@D)
	bison -Wall -Werror --defines=$(BUILD)/grammar/parser.h -o $@ $<

$(BUILD)/grammar/lexer.c: grammar/lexer.l $(BUILD)/grammar/parser.c
	@mkdir -p $(@D)
	flex --header-file=$(BUILD)/grammar/lexer.h -o $@ $<

# Generated code: our warnings, minus those flex and bison output trips.
$(BUILD)/grammar/%.o: $(BUILD)/grammar/%.c
	$(CC) $(CFLAGS) -Wno-unused-function -Wno-sign-compare -Icompiler -I$(BUILD)/grammar -c -o $@ $<

$(call obj,$(COMP_SRC)) $(BUILD)/compiler/pipecc_main.o: $(GRAM_C)

# The one version string of the three tools (plan/cli.c), from the VERSION file.
$(BUILD)/plan/cli.o: plan/cli.c VERSION
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DPIPECC_VERSION='"$(VERSION)"' -c -o $@ $<

# The transformer kernels' element-wise loops (GELU, SiLU, the softmaxes, through
# tk_exp) vectorize: at every -O, with the cost model that allows run-time alias checks,
# and without trapping math (it keeps tk_exp's clamps from becoming selects).  The
# values are unchanged: no fast-math, so no reassociation and no FMA contraction.
$(BUILD)/runtime/tkernels.o: CFLAGS += -ftree-vectorize -fvect-cost-model=dynamic -fno-trapping-math

# BLAS users: the cpu device (runtime/cpu.c, its layer rows in runtime/cpu_layers.c) and
# the transformer kernels (runtime/tkernels.c).
$(BUILD)/runtime/cpu.o $(BUILD)/runtime/cpu_layers.o $(BUILD)/runtime/tkernels.o: \
		$(BUILD)/runtime/%.o: runtime/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(BLAS_CFLAGS) -c -o $@ $<

$(BUILD)/runtime/launch_mpi.o $(BUILD)/runtime/comm_mpi.o: $(BUILD)/runtime/%.o: runtime/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Icompiler -I$(BUILD)/grammar -c -o $@ $<

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) -O2 -std=c++17 -DHAVE_CUDA $(NCCL_FLAGS) -MMD -MP -Xcompiler -Wall -c -o $@ $<

demo: all
	sh scripts/demo.sh $(BIN)

check test: all $(TESTS) $(FA_TOOLS)
	BIN=$(BIN) BUILD=$(BUILD) sh tests/run.sh $(TESTS)

# Optional, never part of check: PyTorch loads and dry-runs every CSV pipecc writes with
# --emit torch-csv --comms (tests/torch/check_load.py).  PYTHON must import torch
# (make check-torch PYTHON=/path/to/venv/bin/python); without it the target says so.
PYTHON ?= python3
check-torch: all
	@if $(PYTHON) -c 'import torch' 2>/dev/null; then \
		$(PYTHON) tests/torch/check_load.py $(BIN); \
	else \
		echo "check-torch: skipped: $(PYTHON) cannot import torch"; \
	fi

# The fuzzers are built by a second make in FUZZ=1 mode (clang, its own build folder);
# the seeds come from the examples compiled by this one's pipecc.
fuzz: all
	$(MAKE) --no-print-directory FUZZ=1 fuzzers
	sh tests/fuzz/run.sh bin/fuzz $(FUZZ_SECONDS) $(BIN)

fuzzers: $(FUZZERS)

# The token-file readers depend on nothing else of the runtime (runtime/data.h).
$(BIN)/fuzz_data: $(BUILD)/runtime/data.o
# ... and so does the checkpoints' safetensors reader (runtime/safet.h).
$(BIN)/fuzz_safet: $(BUILD)/runtime/safet.o
# ... and the public API's over the library's objects.
$(BIN)/fuzz_api: $(API_OBJ)

$(BIN)/fuzz_%: $(BUILD)/tests/fuzz/fuzz_%.o $(COMP_OBJ) $(SIM_OBJ) $(PLAN_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

bench: all
	BIN=$(BIN) sh bench/run.sh

# Mutation testing: bench/mutations.txt, each alone in a copy of the tree (slow).
mutate:
	sh bench/mutate.sh

# The transformer-stage bench (bench/bench_tf.sh): the runtime and plan objects, with
# cblas_sgemm wrapped so that it can time and replay the kernels' own GEMMs.
$(BUILD)/bench/tf_bench: bench/tf_bench.c $(RT_OBJ) $(PLAN_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(BLAS_CFLAGS) -Wl,--wrap=cblas_sgemm $(LDFLAGS) -o $@ $^ \
		$(RT_LIBS) $(BLAS_LIBS) $(LDLIBS)

MAN1 := man/pipecc.1 man/pipesim.1 man/piperun.1
MAN5 := man/pipe.5 man/pipecc-plan.5
MAN3 := man/pipecc.3
# The library's files under $(PREFIX)/lib: both libraries and the two links to the shared
# one (the soname's, and the bare name the linker's -lpipecc finds).
LIB_FILES := $(notdir $(LIBS)) $(LIB_SONAME) libpipecc.so
# The folders install needs, parents first.  Those missing before it are written to
# INST_RECORD (the first install's list stays), and uninstall removes those, once empty,
# and no other: /usr/local/bin empty on a fresh machine was there before.
INST_DIRS := $(PREFIX) $(PREFIX)/bin $(PREFIX)/share $(PREFIX)/share/man \
	$(PREFIX)/share/man/man1 $(PREFIX)/share/man/man3 $(PREFIX)/share/man/man5 \
	$(PREFIX)/share/pipecc $(PREFIX)/include $(PREFIX)/lib $(PREFIX)/lib/pkgconfig
INST_RECORD := $(DESTDIR)$(PREFIX)/share/pipecc/installed-folders
install: all
	@new=; for d in $(INST_DIRS); do [ -d "$(DESTDIR)$$d" ] || new="$$new $$d"; done; \
	install -d $(addprefix $(DESTDIR),$(INST_DIRS)) && \
	{ [ -f $(INST_RECORD) ] || printf '%s\n' $$new >$(INST_RECORD); }
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(MAN3) $(DESTDIR)$(PREFIX)/share/man/man3/
	install -m 644 $(MAN5) $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 644 include/pipecc.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(notdir $(LIB_SO)) $(DESTDIR)$(PREFIX)/lib/$(LIB_SONAME)
	ln -sf $(LIB_SONAME) $(DESTDIR)$(PREFIX)/lib/libpipecc.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' api/pipecc.pc.in \
		>$(DESTDIR)$(PREFIX)/lib/pkgconfig/pipecc.pc

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(notdir $(TOOLS))) \
		$(addprefix $(DESTDIR)$(PREFIX)/share/man/man1/,$(notdir $(MAN1))) \
		$(addprefix $(DESTDIR)$(PREFIX)/share/man/man3/,$(notdir $(MAN3))) \
		$(addprefix $(DESTDIR)$(PREFIX)/share/man/man5/,$(notdir $(MAN5))) \
		$(DESTDIR)$(PREFIX)/include/pipecc.h $(DESTDIR)$(PREFIX)/lib/pkgconfig/pipecc.pc \
		$(addprefix $(DESTDIR)$(PREFIX)/lib/,$(LIB_FILES))
	@if [ -f $(INST_RECORD) ]; then \
		dirs=$$(sort -r $(INST_RECORD)); rm -f $(INST_RECORD); \
		for d in $$dirs; do rmdir "$(DESTDIR)$$d" 2>/dev/null || true; done; \
	fi

clean:
	rm -rf build bin

help:
	@sed -n '2,13p' Makefile

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
