# Session 10 call D (one H100): helper branch wt-train's training-step calibration and held-out steps (its tree
# from .gpu/train.tar), then its held-out megatron step; kernel_platform() on CUDA (main).
source .gpu/env.sh
mkdir -p $OUT/train
python3 -c "
import jax; from framework.backends.maxtext.models import kernel_platform
print('kernel_platform', kernel_platform(), 'default_backend', jax.default_backend(), 'platform_version', jax.devices()[0].client.platform_version)" 2>&1 | tail -1 | tee $OUT/kernel_platform.txt
mkdir -p /tmp/t_train && tar xf .gpu/train.tar -C /tmp/t_train && cd /tmp/t_train && export PYTHONPATH=/tmp/site:/tmp/t_train
echo "== train $(date +%T)"
timeout 330 python -m sims.benchmarks.train_steps --out $OUT/train > $OUT/train/train_steps.log 2>&1; echo "train rc=$? $(date +%T)"
tail -30 $OUT/train/train_steps.log
python -c "import megatron.core" && timeout 150 python -m framework.backends.megatron.benchmarks.pretrain_step --layer-specs local_sdpa --no-baseline --out $OUT/train/megatron_1b.json > $OUT/train/megatron.log 2>&1; echo "megatron rc=$? $(date +%T)"
tail -5 $OUT/train/megatron.log
cd $OUT && tar czf train.tgz train --remove-files; ls -la $OUT
