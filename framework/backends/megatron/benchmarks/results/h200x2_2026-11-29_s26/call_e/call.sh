# Session 26 call E (one GPU of the 2 x H200): megatron's 1-GPU step under torch.profiler (as session 11 profiled it:
# its kernels matched the preflight within 2%) with the SM clock sampled every 50 ms: under the profiler the host is
# slower and the GPU idles, so the card should hold a higher clock than through the unprofiled step (call D: 1,875 MHz).
source .gpu/env.sh
R=$OUT/results/s26e; mkdir -p $R; cp "$0" $R/call.sh; echo 7b36f83 > $R/commit.txt
trap "tar czf $OUT/s26e.tgz -C $OUT/results s26e" EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/megatron/*.whl && echo megatron ok
export CUDA_VISIBLE_DEVICES=0
nvidia-smi -i 0 --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv,noheader -lms 50 > $R/smi.csv &
SMI=$!
date '+%Y/%m/%d %H:%M:%S.%N' > $R/t_start
timeout 200 python3 -m framework.backends.megatron.benchmarks.profile_step --out-dir $R/profile > $R/profile.log 2>&1
echo "profile rc=$? ${SECONDS}s"; date '+%Y/%m/%d %H:%M:%S.%N' > $R/t_end
kill $SMI; ls $R/profile; head -40 $R/profile/*rank0_ops.txt
