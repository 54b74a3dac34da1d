# Call 2: where fast mode's time goes (before and after packing prefills into one call), then the decode bench.
source .gpu/setup.sh || exit 1
[ -f /tmp/gguf/synthetic-1b-f16.gguf ] || python3 -m appliance.bench.synthetic_gguf --donor .gpu/synthetic-tiny-f16.gguf --out /tmp/gguf llama-1b
for seq in 64 16; do
  echo "== before (HEAD), $seq sequences"; PYTHONPATH=$REPO/.gpu/old:$PYTHONPATH timeout 100 python3 .gpu/probe.py gap /tmp/gguf/synthetic-1b-f16.gguf $seq $OUT/gap-before-$seq.json 2>&1 | tail -6
  echo "== after (packed), $seq sequences"; timeout 100 python3 .gpu/probe.py gap /tmp/gguf/synthetic-1b-f16.gguf $seq $OUT/gap-after-$seq.json 2>&1 | tail -6
done
echo "== decode bench, 1B F16"
timeout 200 python3 -m appliance bench decode --model gguf-1b-f16 --models bench_results/gpu-llama-models.toml --out $OUT 2>&1 | tail -12
ls -la $OUT
