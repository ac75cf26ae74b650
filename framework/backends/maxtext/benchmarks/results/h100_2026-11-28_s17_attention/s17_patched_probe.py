"""decode_probe with jax's gqa forced to the settings in $ATTN (JSON): the model's decode attention at another
block_k / k_splits / warps / stages, without changing the code (session 17 A/B)."""
import functools, json, os, sys
import jax.experimental.pallas.ops.gpu.decode_attention as pallas_decode
setting = {k: v for k, v in json.loads(os.environ["ATTN"]).items() if k in ("block_k", "k_splits", "num_warps", "num_stages")}
original = pallas_decode.gqa
def forced(*args, **kwargs):
    return original(*args, **{**kwargs, **setting})
pallas_decode.gqa = forced
from framework.backends.maxtext.benchmarks import decode_probe
decode_probe.main(sys.argv[1:])
