# simtrain's held-out H100 check of the session-13 update model (its gpu_check.sh), results under $OUT/results/simtrain
source .gpu/env.sh
OUT=$OUT/results/simtrain bash framework/backends/maxtext/benchmarks/results/cpu_2026-11-27_s13_trainsteps/gpu_check.sh
