"""Run under torchrun (gloo): the expert-parallel MoE block equals a per-token reference that uses
every rank's experts (gathered), so the dispatch/combine orderings are right."""

import torch
import torch.distributed as dist

from sims.benchmarks.accuracy import model_config
from sims.benchmarks.plain_decoder import ExpertParallelDecoder


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = model_config("tiny_moe")
    torch.manual_seed(rank)
    tokens = 8
    model = ExpertParallelDecoder(cfg, world, rank, torch.device("cpu"), torch.float32, tokens)
    w = model.layers[0]
    y = torch.randn(2, tokens // 2, cfg["hidden_size"])
    got = model._mlp(w, y).reshape(tokens, -1)
    gate_up = [torch.empty_like(w["experts_gate_up"]) for _ in range(world)]
    down = [torch.empty_like(w["experts_down"]) for _ in range(world)]
    dist.all_gather(gate_up, w["experts_gate_up"])
    dist.all_gather(down, w["experts_down"])
    gate_up, down = torch.cat(gate_up), torch.cat(down)
    x = y.reshape(tokens, -1)
    top = torch.nn.functional.linear(x, w["router"]).topk(model.top_k, dim=-1).values.softmax(dim=-1)
    expected = torch.zeros_like(x)
    for t in range(tokens):
        for j in range(model.top_k):
            e = (t * model.top_k + j) % model.experts
            g, u = (gate_up[e] @ x[t]).chunk(2)  # weights stored (experts, out, in)
            expected[t] += top[t, j] * (down[e] @ (torch.nn.functional.silu(g) * u))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    if rank == 0:
        print("moe ep check ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
