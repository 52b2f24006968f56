# Esper-Go build targets. Everything here needs only Go unless noted.
GO       ?= go
PKGS     ?= ./...
PYTHON   ?= /usr/bin/python3
BENCHTIME ?= 1x

.PHONY: all build esper test test-sim race vet fmt-check bench demo fixtures cuda-deps chromium-deps ptx cuda-check gpu-bundle fuzz

all: build test

build:
	$(GO) build $(PKGS)

## esper: bin/esper, stamped with its commit (the JSON of esper bench
## records it; see bench.BuildCommit)
COMMIT_STAMP = -ldflags "-X github.com/esper-go/esper/bench.BuildCommit=$$(git rev-parse --short HEAD 2>/dev/null)$$(git diff --quiet HEAD -- 2>/dev/null || echo -dirty)"
# The GPU bundle's binaries are stripped (-s -w): the device machine takes a
# working tree of 64 MiB at most, and the symbol tables are a third of it.
GPU_STAMP = -ldflags "-s -w -X github.com/esper-go/esper/bench.BuildCommit=$$(git rev-parse --short HEAD 2>/dev/null)$$(git diff --quiet HEAD -- 2>/dev/null || echo -dirty)"
esper:
	$(GO) build $(COMMIT_STAMP) -o bin/esper ./cmd/esper

## test: vet, gofmt check, the full test suite and the race detector on the
## packages with goroutines (what CI runs)
test: vet fmt-check
	$(GO) test -count=1 $(PKGS)
	@$(MAKE) --no-print-directory test-sim
	@$(MAKE) --no-print-directory race

## test-sim: the suites of the domains above the kernels again on the
## strict simulated device (internal/testdevice: ESPER_TEST_DEVICE=sim),
## whose host accessors refuse device tensors
SIM_PKGS ?= ./internal/testdevice ./recipe ./data ./nn/... ./optim/... ./tolaria/... ./kasmina/... ./tamiyo/... ./simic/...
test-sim:
	ESPER_TEST_DEVICE=sim $(GO) test -count=1 $(SIM_PKGS)

## fuzz: every fuzz target of a reader a user can feed (package:target),
## FUZZTIME each (60s by default; CI runs 10s). A failure leaves its
## input under the package's testdata/fuzz and stops the run. A bare
## "context deadline exceeded" with no failing input written is Go's own
## fuzz coordinator missing its deadline under load (golang/go#75804,
## fixed in Go 1.27): it is reported, the target's corpus is replayed, and
## only a failure of that replay stops the run.
FUZZTIME ?= 60s
FUZZ_TARGETS ?= ./tensor/safetensors:FuzzParse ./nn:FuzzLoad ./tamiyo:FuzzLoadPolicy \
	./data:FuzzOpenIDX ./leyline:FuzzEventJSON ./leyline:FuzzPayload \
	./tolaria:FuzzResumeMeta ./tolaria:FuzzResumeFile ./simic:FuzzPPOState
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  echo "== $$name ($$pkg, $(FUZZTIME))"; \
	  log=$$(mktemp); \
	  if ! $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg >$$log 2>&1; then \
	    if grep -q 'context deadline exceeded' $$log && ! grep -q 'Failing input written' $$log; then \
	      echo "$$name: the fuzz coordinator missed its deadline (golang/go#75804), no failing input; replaying the corpus"; \
	      $(GO) test -count=1 -run "^$$name\$$" $$pkg || { cat $$log; rm -f $$log; exit 1; }; \
	    else cat $$log; rm -f $$log; exit 1; fi; \
	  fi; \
	  grep -E 'elapsed: .*execs' $$log | tail -1; rm -f $$log; \
	done

## race: the race detector over the packages that run goroutines. It needs
## cgo and a C compiler; without one it says so and skips.
RACE_PKGS ?= ./nissa/... ./kasmina/... ./leyline ./bench ./kernels/cpu ./tolaria/... ./tamiyo ./data
race:
	@if command -v $${CC:-cc} >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1; then \
	  echo "$(GO) test -race -count=1 $(RACE_PKGS)"; \
	  CGO_ENABLED=1 $(GO) test -race -count=1 $(RACE_PKGS); \
	else \
	  echo "make race: SKIPPED — the race detector needs a C compiler (apt-get install gcc)"; \
	fi

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

## bench: every go benchmark once, with allocations (use BENCHTIME=2s for figures)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## demo: the main job, esper train on the embedded synthetic task with its
## defaults (--kernel 1 --base-channels 4 --lr 0.05 --schedule cosine
## --train-size 3000 --epochs 45 --baseline). The host is deliberately
## impaired (1x1 convolutions cannot see the gratings the classes are made
## of, like the reference's cifar_impaired preset), so it stalls near
## chance; the heuristic germinates 3x3 seeds into its slots, blends and
## fossilizes them, and the run ends by comparing with the same host
## trained alone. About 8 seconds on 2 cores once built.
DEMO_FLAGS ?=
demo:
	$(GO) run ./cmd/esper train $(DEMO_FLAGS)

## fixtures: regenerate the PyTorch reference fixtures (needs Debian's python3-torch)
fixtures:
	@test -x $(PYTHON) && $(PYTHON) -c 'import torch' 2>/dev/null || { \
	  echo "fixtures need Debian's PyTorch: apt-get install python3-torch libopenblas0-pthread"; exit 1; }
	OMP_NUM_THREADS=2 $(PYTHON) bench/pytorch/make_fixtures.py --out testdata/fixtures

## cuda-deps: Debian's CUDA 11.8 toolkit (nvcc, cuda.h, libcuda for
## linking) and g++-11 from bookworm's contrib/non-free (GPU.md); a no-op
## when nvcc and g++-11 are already there. Needs root (or sudo) and network.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CUDA_SOURCES := /etc/apt/sources.list.d/esper-cuda-nonfree.sources
cuda-deps:
	@if command -v nvcc >/dev/null 2>&1 && command -v g++-11 >/dev/null 2>&1; then \
	  echo "cuda-deps: nvcc and g++-11 are installed"; \
	else \
	  echo "cuda-deps: installing nvidia-cuda-toolkit and nvidia-cuda-toolkit-gcc (about 3 GB)"; \
	  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: contrib non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
	    | $(SUDO) tee $(CUDA_SOURCES) >/dev/null && \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nvidia-cuda-toolkit nvidia-cuda-toolkit-gcc; \
	fi

## chromium-deps: Debian's chromium, for the dashboard's browser test
## (cmd/esper TestUIBrowser, driven with chromedp; without a Chromium it
## skips in one line); a no-op when one is on PATH. Needs root (or sudo)
## and network.
chromium-deps:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1; then \
	  echo "chromium-deps: a Chromium is installed"; \
	else \
	  echo "chromium-deps: installing Debian's chromium (about 300 MB)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	fi

## ptx: regenerate kernels/cuda/ptx/*.ptx from kernels/cuda/src/*.cu, and
## kernels/cuda/cubin/ (sm_90 machine code assembled from that PTX) (commit
## the result; TestPTXUpToDate and TestCubinsMatchPTX fail when a source
## changed without it)
ptx: cuda-deps
	kernels/cuda/mkptx.sh

## cuda-check: what CI checks of the CUDA build without a GPU: the toolkit,
## PTX up to date, go vet with the cuda tag, and every cuda-tagged package
## and test binary compiled (never run: a cuda binary exits without a GPU)
# cgo's C compiler: cc, else the toolkit's gcc-11 (a machine with only Go
# has no cc until cuda-deps brings gcc-11).
CUDA_CC = $(shell command -v cc >/dev/null 2>&1 && echo cc || echo gcc-11)
CUDA_GO = CGO_ENABLED=1 CC=$(CUDA_CC) $(GO)
cuda-check: cuda-deps
	$(GO) test -count=1 -run 'TestPTXUpToDate|TestCubinsMatchPTX' ./kernels/cuda
	$(CUDA_GO) vet -tags cuda $(PKGS)
	$(CUDA_GO) build -tags cuda $(PKGS)
	$(CUDA_GO) test -tags cuda -count=1 -exec /bin/true $(PKGS) >/dev/null
	@echo "cuda-check: vet and compile with -tags cuda passed"

## gpu-bundle: everything a GPU run needs, built here (the GPU machine has
## no Go): cuda-tagged test binaries, esper, the PyTorch peer scripts and
## gpu/run.sh (GPU.md). Run it there as: gpu/run.sh OUTDIR
gpu-bundle: cuda-deps
	rm -rf gpu && mkdir -p gpu/pytorch
	$(CUDA_GO) test -tags cuda -c -ldflags "-s -w" -o gpu/kernels_cuda.test ./kernels/cuda
	$(CUDA_GO) build -tags cuda $(GPU_STAMP) -o gpu/esper ./cmd/esper
	cp bench/pytorch/*.py gpu/pytorch/
	cp kernels/cuda/gpu_run.sh gpu/run.sh
	cp kernels/cuda/ncu_top.py gpu/
	# The binaries travel gzipped (the device machine takes 64 MiB with the
	# working tree); run.sh unpacks them.
	gzip -f gpu/esper gpu/kernels_cuda.test
	@echo "gpu-bundle: gpu/ is ready; on the GPU machine run gpu/run.sh OUTDIR"
