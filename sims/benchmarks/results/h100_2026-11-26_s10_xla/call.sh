# Session 10 call C (one H100): helper branch wt-xla's xla-stack calibration (its tree from .gpu/xla.tar),
# and kernel_platform() on CUDA (main).
source .gpu/env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
python3 -c "
import jax; from framework.backends.maxtext.models import kernel_platform
print('kernel_platform', kernel_platform(), 'default_backend', jax.default_backend(), 'platform_version', jax.devices()[0].client.platform_version)"
mkdir -p /tmp/t_xla && tar xf .gpu/xla.tar -C /tmp/t_xla && cd /tmp/t_xla && export PYTHONPATH=/tmp/site:/tmp/t_xla
echo "== xla $(date +%T)"
timeout 420 bash -c "$(cat /tmp/t_xla/.command)"; echo "xla rc=$? $(date +%T)"
cd $OUT && tar czf xla.tgz xla --remove-files; ls -la $OUT
