"""The collectives of a compiled program's HLO text (the sampler's `*_hlo.txt` of these calls), per computation:
each one's op and gathered (output) MiB, and whether the computation is a while loop's body (the decode loop).
    python <this file> FSDP_HLO.txt > hlo_collectives.json          (stdlib only)
"""
import json
import re
import sys

BYTES = {"bf16": 2, "f16": 2, "f32": 4, "s32": 4, "u32": 4, "pred": 1}
OP = re.compile(r'^\s*(?:ROOT )?%[\w.\-]+ = (.+?) (all-gather-done|all-gather|all-reduce-done|all-reduce|reduce-scatter|'
                r'all-to-all-done|all-to-all|collective-permute-done|collective-permute)\(', re.M)


def mib(shape: str) -> float:
    total = 0
    for dtype, dims in re.findall(r'(bf16|f16|f32|s32|u32|pred)\[([\d,]*)\]', shape):
        count = 1
        for size in filter(None, dims.split(",")):
            count *= int(size)
        total += count * BYTES[dtype]
    return round(total / 2**20, 3)


def main(path: str) -> dict:
    text = open(path).read()
    bodies = set(re.findall(r'body=%?([\w.\-]+)', text))
    out = {}
    for match in re.finditer(r'^(?:ENTRY )?%?([\w.\-]+) [^\n]*\{\n(.*?)\n\}', text, re.M | re.S):
        name, body = match.groups()
        ops = [[op, mib(shape)] for shape, op in OP.findall(body) if not op.endswith("reduce") or "pred" not in shape]
        if len(ops) > 2:
            gathered = sum(size for op, size in ops if op.startswith("all-gather"))
            out[("decode loop body " if name in bodies else "") + name] = {
                "all_gather_calls": sum(op.startswith("all-gather") for op, _ in ops), "all_gather_mib": round(gathered, 2),
                "ops": ops}
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1]), indent=1))
