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
# Usage: scripts/llamacpp-tools.sh [DIR]   (default: $SWITCHYARD_HOME/llamacpp-tools,
#        SWITCHYARD_HOME defaulting to ~/.cache/switchyard). Set LLAMACPP_TOOLS to a folder
#        that already holds the four binaries to use those instead.
set -euo pipefail

if [ -n "${LLAMACPP_TOOLS:-}" ]; then
  for t in llama-bench llama-quantize llama-server llama-perplexity; do
    [ -x "$LLAMACPP_TOOLS/$t" ] || { echo "error: LLAMACPP_TOOLS=$LLAMACPP_TOOLS has no $t" >&2; exit 1; }
  done
  echo "$LLAMACPP_TOOLS"; exit 0
fi

version=0.3.36
home="${SWITCHYARD_HOME:-$HOME/.cache/switchyard}"
dir="${1:-$home/llamacpp-tools}"
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
if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && [ "${LLAMACPP_AMX:-0}" != 1 ]; then
  flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
if [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-quantize" ] && [ -x "$bin/llama-server" ] \
  && [ -x "$bin/llama-perplexity" ] && [ "$(cat "$bin/cflags" 2>/dev/null)" = "$flags" ]; then
  echo "$bin"; exit 0
fi

echo "building llama.cpp's tools into $bin (~15 minutes on 2 cores)..." >&2
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
cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$src/build" -j "$(nproc)" \
  --target llama-bench llama-quantize llama-server llama-perplexity >&2
mkdir -p "$bin"
cp "$src/build/bin/llama-bench" "$src/build/bin/llama-quantize" "$src/build/bin/llama-server" \
  "$src/build/bin/llama-perplexity" "$bin/"
printf '%s' "$flags" > "$bin/cflags"
echo "$bin"
