#!/usr/bin/env bash
# Re-vendor ggml from the llama-cpp-python source distribution (see csrc/third_party/ggml/VENDORED.md).
# Usage: tools/vendor_ggml.sh [VERSION | path/to/llama_cpp_python-X.Y.Z.tar.gz]
# Copies ggml unmodified, keeps the CPU, BLAS and CUDA backends, drops the others.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dest="$here/csrc/third_party/ggml"
arg=${1:-0.3.36}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ -f "$arg" ]]; then
  tarball=$arg
else
  # --no-build-isolation: pip only reads the metadata; it must not build the package's build deps.
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python --no-build-isolation \
    "llama-cpp-python==$arg" -d "$work"
  tarball=$(ls "$work"/llama_cpp_python-*.tar.gz)
fi
tar -xzf "$tarball" -C "$work"
src=$(ls -d "$work"/llama_cpp_python-*/vendor/llama.cpp)
commit=$(cat "$work"/llama_cpp_python-*/.git/modules/vendor/llama.cpp/HEAD 2>/dev/null || echo unknown)

rm -rf "$dest"/{CMakeLists.txt,cmake,include,src,LICENSE}
mkdir -p "$dest"
cp -r "$src/ggml/CMakeLists.txt" "$src/ggml/cmake" "$src/ggml/include" "$src/ggml/src" "$dest/"
cp "$src/LICENSE" "$dest/LICENSE"
# Backends we do not build: everything but cpu, blas and cuda.
for d in "$dest"/src/ggml-*/; do
  case "$(basename "$d")" in
    ggml-cpu|ggml-blas|ggml-cuda) ;;
    *) rm -rf "$d" ;;
  esac
done
echo "vendored ggml from $(basename "$tarball") (llama.cpp $commit) into $dest"
echo "sha256 $(sha256sum "$tarball" | cut -d' ' -f1)"
