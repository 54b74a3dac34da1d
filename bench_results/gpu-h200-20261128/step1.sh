# Call 1: build, then which 135M-shape variants crash (each in its own process, llama.cpp's log on).
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv; nproc; python3 --version
source .gpu/setup.sh || exit 1
mkdir -p /tmp/gguf
python3 .gpu/variants.py .gpu/synthetic-tiny-f16.gguf /tmp/gguf
python3 -m appliance.bench.synthetic_gguf --donor .gpu/synthetic-tiny-f16.gguf --out /tmp/gguf --type Q4_1 llama-135m
for v in 135m 135m-kv9 135m-heads8 135m-vocab128k 135m-untied 135m-layers16 synthetic-135m-q4_1; do
  echo "== $v"
  APPLIANCE_LLAMA_LOG=1 timeout 90 python3 -X faulthandler .gpu/probe.py smoke /tmp/gguf/$v.gguf > $OUT/smoke-$v.log 2>&1
  echo "rc $?"; grep -E "bare loop|engine|error|Error|Fatal|CUDA|fault|File \"" $OUT/smoke-$v.log | grep -v "ggml_cuda_init\|Device 0\|found 1 CUDA" | head -12
done
echo "== CLI, 135m q4_1 quick"
APPLIANCE_LLAMA_LOG=1 timeout 100 python3 -X faulthandler -m appliance bench decode --quick --model gguf-135m-q4_1 --models bench_results/gpu-llama-models.toml --out $OUT > $OUT/cli-135m.log 2>&1
echo "rc $?"; grep -vE "llama_model_loader|load_tensors|print_info|llama_context|llama_kv|graph_|sched_|init_tokenizer|load:|CUDA0|CPU_Mapped|llama_init|set_abort" $OUT/cli-135m.log | tail -25
cd /tmp/wheel && for f in *.whl; do split -b 15M -d $f $OUT/$f.part; done; ls -la $OUT
