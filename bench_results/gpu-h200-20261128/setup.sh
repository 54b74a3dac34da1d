# Shared set-up on the lent GPU machine: our pure-Python deps, then llama-cpp-python built with CUDA (skipped if there).
export PYTHONUNBUFFERED=1 REPO=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$REPO:/tmp/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
if ! python3 -c "import llama_cpp" 2>/dev/null; then
  (cd /tmp && tar xzf $REPO/.gpu/llama_cpp_python-0.3.36.tar.gz)
  start=$(date +%s)
  CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=off -DGGML_CUDA_NCCL=off -DGGML_CUDA_FA=off -DLLAVA_BUILD=off" \
  CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip wheel -q --no-build-isolation --no-deps -w /tmp/wheel /tmp/llama_cpp_python-0.3.36 > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
  echo "build: $(( $(date +%s) - start )) s"; ls -la /tmp/wheel
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/wheel/*.whl || exit 1
fi
python3 -c "import llama_cpp as C; print('llama_cpp', C.__version__, 'gpu offload', C.llama_supports_gpu_offload())"
