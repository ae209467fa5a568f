#!/usr/bin/env bash
# Builds llama.cpp's C++ tools (llama-bench, llama-quantize, llama-server,
# llama-perplexity) once and prints the folder that holds them: the speed, quantization,
# serving and perplexity anchors our benchmark scripts compare against.
#
# The sources are the llama.cpp copy inside the llama-cpp-python 0.3.36 source
# distribution (fetched with `python3 -m pip download`), built with CMake + Ninja from a
# private virtual environment and -march=native (GGML_NATIVE). Takes ~15 minutes on 2
# cores; later calls return at once.
#
# Usage: scripts/llamacpp-tools.sh [--isa native|avx2] [--vulkan] [DIR]
#   DIR    default: $SWITCHYARD_HOME/llamacpp-tools (SWITCHYARD_HOME defaulting to
#          ~/.cache/switchyard), .../llamacpp-tools-avx2 with --isa avx2, or
#          .../llamacpp-tools-vulkan with --vulkan
#   --isa  native (default): -march=native. avx2: GGML_NATIVE=OFF with AVX, AVX2, FMA,
#          F16C, BMI2 and SSE4.2 on and every AVX-512, AVX-VNNI and AMX option off, so a
#          host with AVX-512 runs the kernels an AVX2-only host runs (what
#          SWITCHYARD_ISA=avx2 does for switchyard); built into a folder of its own.
#   --vulkan  llama.cpp's Vulkan backend (-march=native CPU part) into a folder of its
#          own, the GPU anchor of scripts/bench-gpu-vs-llamacpp.sh and gpu-check.sh;
#          installs Debian's glslc, glslang-tools, spirv-headers and libvulkan-dev (as
#          root or with sudo -n). Debian's Vulkan headers (1.3.239) lack
#          VK_EXT_layer_settings, which llama.cpp's instance set-up uses only to switch
#          on a validation-layer option, so that option is taken out of the copy built
#          here; the compute path is untouched. llama.cpp skips CPU-type Vulkan devices
#          unless GGML_VK_VISIBLE_DEVICES=0 names one (lavapipe).
# Set LLAMACPP_TOOLS (native), LLAMACPP_TOOLS_AVX2 (--isa avx2) or LLAMACPP_TOOLS_VULKAN
# (--vulkan) to a folder that already holds the binaries of that kind to use those
# instead.
set -euo pipefail

isa=native
vulkan=0
dir_arg=""
while [ $# -gt 0 ]; do
  case "$1" in
    --isa)
      [ $# -ge 2 ] || { echo "error: --isa needs a value: native or avx2" >&2; exit 2; }
      isa="$2"; shift 2 ;;
    --isa=*) isa="${1#--isa=}"; shift ;;
    --vulkan) vulkan=1; shift ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
    *)
      [ -z "$dir_arg" ] || { echo "error: more than one DIR: $dir_arg, $1" >&2; exit 2; }
      dir_arg="$1"; shift ;;
  esac
done
case "$isa" in
  native) given="${LLAMACPP_TOOLS:-}"; given_var=LLAMACPP_TOOLS; folder=llamacpp-tools ;;
  avx2) given="${LLAMACPP_TOOLS_AVX2:-}"; given_var=LLAMACPP_TOOLS_AVX2; folder=llamacpp-tools-avx2 ;;
  *) echo "error: --isa $isa is not a llama.cpp build: use native or avx2" >&2; exit 2 ;;
esac
tools=(llama-bench llama-quantize llama-server llama-perplexity)
if [ "$vulkan" = 1 ]; then
  [ "$isa" = native ] || { echo "error: --vulkan builds with --isa native only" >&2; exit 2; }
  given="${LLAMACPP_TOOLS_VULKAN:-}"; given_var=LLAMACPP_TOOLS_VULKAN
  folder=llamacpp-tools-vulkan
  tools=(llama-bench llama-server)
fi

if [ -n "$given" ]; then
  for t in "${tools[@]}"; do
    [ -x "$given/$t" ] || { echo "error: $given_var=$given has no $t" >&2; exit 1; }
  done
  echo "$given"; exit 0
fi

if [ "$isa" = avx2 ]; then
  for f in avx2 fma f16c; do
    grep -qw "$f" /proc/cpuinfo 2>/dev/null ||
      { echo "error: --isa avx2: this CPU lacks $f, so it cannot run an AVX2 build" >&2; exit 1; }
  done
fi

version=0.3.36
home="${SWITCHYARD_HOME:-$HOME/.cache/switchyard}"
dir="${dir_arg:-$home/$folder}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
bin="$dir/bin"
# llama.cpp's AMX matmul (ggml_backend_amx_mul_mat, compiled in by -march=native on a CPU
# with AMX) faults on its first tile configuration on the AMX host this project has run on
# (ldtilecfg, general protection: every quantized type, one thread or two, while a plain
# tile program runs there), so on such a CPU the tools are built without AMX: llama.cpp's
# fastest mode that runs, its AVX-512 REPACK path included. LLAMACPP_AMX=1 keeps AMX.
# GCC lets an explicit -mno-X win over -march=native whatever their order.
flags=""
if [ "$isa" = native ] && grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && [ "${LLAMACPP_AMX:-0}" != 1 ]; then
  flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
# The instruction-set options: -march=native, or AVX2's set alone. The CPU backend is
# linked in (no GGML_BACKEND_DL, no GGML_CPU_ALL_VARIANTS), so no variant chosen at run
# time can bring AVX-512 back.
if [ "$isa" = avx2 ]; then
  simd=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
        -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF
        -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
        -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
        -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BACKEND_DL=OFF)
  stamp="isa=avx2"
else
  simd=(-DGGML_NATIVE=ON)
  stamp="$flags"
fi
if [ "$vulkan" = 1 ]; then
  simd+=(-DGGML_VULKAN=ON)
  stamp="vulkan $flags"
fi
built=1
for t in "${tools[@]}"; do
  [ -x "$bin/$t" ] || built=0
done
if [ "$built" = 1 ] && [ "$(cat "$bin/cflags" 2>/dev/null)" = "$stamp" ]; then
  echo "$bin"; exit 0
fi
if [ "$vulkan" = 1 ] && ! { command -v glslc >/dev/null && [ -f /usr/include/vulkan/vulkan.h ]; }; then
  echo "installing glslc, glslang-tools, spirv-headers, libvulkan-dev..." >&2
  as_root=""
  [ "$(id -u)" -ne 0 ] && as_root="sudo -n"
  $as_root apt-get update -qq >&2
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq glslc glslang-tools \
    spirv-headers libvulkan-dev >&2
fi

echo "building llama.cpp's tools ($isa) into $bin (~15 minutes on 2 cores)..." >&2
src="$dir/src"
if [ ! -f "$src/CMakeLists.txt" ]; then
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$dir/sdist" >&2
  rm -rf "$src" && mkdir -p "$src"
  tar xzf "$dir/sdist/llama_cpp_python-$version.tar.gz" -C "$src" --strip-components=3 \
    "llama_cpp_python-$version/vendor/llama.cpp"
fi
if [ ! -x "$dir/venv/bin/cmake" ] || [ ! -x "$dir/venv/bin/ninja" ]; then
  python3 -m venv "$dir/venv" >&2
  "$dir/venv/bin/pip" install --quiet cmake ninja >&2
fi
export PATH="$dir/venv/bin:$PATH"
# Each kind builds in a folder of its own: CMake keeps cached options between runs.
build="$src/build"
[ "$isa" = native ] || build="$src/build-$isa"
if [ "$vulkan" = 1 ]; then
  build="$src/build-vulkan"
  # Take out the validation-layer option Debian's headers cannot compile (see --help).
  python3 - "$src/ggml/src/ggml-vulkan/ggml-vulkan.cpp" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
start = text.find("    VkBool32 enable_best_practice")
end = text.find("vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);")
if start != -1 and end != -1:
    end = text.index("\n", end) + 1
    text = text[:start] + text[end:]
    text = text.replace("layers, extensions, &layer_setting_info)", "layers, extensions, nullptr)")
    open(path, "w").write(text)
elif "LayerSettingsCreateInfoEXT" in text:
    sys.exit("error: llama.cpp's Vulkan instance set-up is not the one this script patches")
PY
fi
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${simd[@]}" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$build" -j "$(nproc)" --target "${tools[@]}" >&2
# An AVX2 build must hold no AVX-512 instruction (a ZMM register in its code).
if [ "$isa" = avx2 ] && command -v objdump >/dev/null 2>&1; then
  zmm="$(objdump -d --no-show-raw-insn "$build/bin/llama-bench" | grep -c '%zmm' || true)"
  if [ "$zmm" -gt 0 ]; then
    echo "error: the AVX2 build of llama-bench holds $zmm instructions on ZMM registers" \
      "(AVX-512); see $build/CMakeCache.txt" >&2
    exit 1
  fi
fi
mkdir -p "$bin"
for t in "${tools[@]}"; do
  cp "$build/bin/$t" "$bin/"
done
printf '%s' "$stamp" > "$bin/cflags"
echo "$bin"
