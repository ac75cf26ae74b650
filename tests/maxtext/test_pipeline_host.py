"""The host side of the off-policy pipeline (trainers/pipeline.py OffPolicyRollouts) with stand-in samplers, so
the order is checked without a model: a batch already sampled is decoded and scored by `prefetch` while the
update computes (once, on the calling thread), stays in flight for a checkpoint, and the weight move started by
`after_update` is not waited for there but timed and reported by the take that hands the moved weights on.
The samplers, encoder and placements here are stand-ins (the real ones: tests/maxtext/test_off_policy.py)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np

ROWS, PROMPT, NEW = 2, 3, 4


class _Sampler:
    """generate(policy, ...) -> a SampleOutput whose tokens say which policy sampled it; waits on `gate`."""

    eos_token_ids = [0]

    def __init__(self):
        self.gate = threading.Event()
        self.gate.set()

    def generate(self, policy, prompts, rng, sampling):
        from framework.backends.maxtext.sampler import SampleOutput

        self.gate.wait(10)
        ones = np.ones((ROWS, PROMPT), np.int32)
        return SampleOutput(prompt_ids=ones, prompt_mask=ones, completion_ids=np.full((ROWS, NEW), 10 + policy),
                            completion_mask=np.ones((ROWS, NEW), np.int32),
                            completion_log_probs=np.zeros((ROWS, NEW), np.float32))


class _Encoder:
    def encode(self, examples):
        return [[1, 1, 1]] * len(examples), 0

    def decode(self, ids, mask):
        return [" ".join(map(str, row)) for row in ids]


class _Placement:
    """policy(params) -> (params, seconds) as RolloutPlacement's; move(params) -> params, counted."""

    def __init__(self):
        self.moves = 0

    def policy(self, params):
        return params, 0.0

    def move(self, params):
        self.moves += 1
        return params


def _pipeline(lag: int):
    from framework.backends.maxtext.trainers.pipeline import OffPolicyRollouts

    scored = []  # (the completion text scored, the scoring thread)

    def score(rollouts):
        scored.append((rollouts.completions[0], threading.current_thread()))
        return "score of " + rollouts.completions[0]

    samplers, placements = [_Sampler() for _ in range(lag)], [_Placement() for _ in range(lag)]
    pipeline = OffPolicyRollouts(samplers, _Encoder(), placements, SimpleNamespace(num_samples=1), score)
    return pipeline, samplers, placements, scored


def _draws():
    return iter([([SimpleNamespace(reference=str(i))] * ROWS, None) for i in range(10)])


def test_a_sampled_batch_is_scored_during_the_update_once_and_stays_in_flight_for_a_checkpoint():
    pipeline, samplers, placements, scored = _pipeline(lag=2)
    draws = _draws()
    rollouts, _, score, timing = pipeline.take(1, 0, lambda: next(draws), last_step=6)  # theta_0 samples B_1 .. B_3
    assert score == "score of 10 10 10 10" and timing["staleness"] == 0.0
    assert scored[-1][1] is threading.main_thread()
    pipeline.groups[1].in_flight()  # B_2 sampled
    pipeline.prefetch(2, last_step=6)  # while update 1 would compute
    assert len(scored) == 2 and scored[-1][1] is threading.main_thread()
    arrays, state = pipeline.checkpoint_part()  # B_2 (prefetched) and B_3: both still in flight
    assert sorted(state) == ["in_flight", "in_flight_2", "rollout_lag"] and state["in_flight"]["references"] == ["1", "1"]
    pipeline.after_update(1, 1, last_step=6)  # theta_1 -> group 1, which samples B_4 next
    assert placements[1].moves == 1 and pipeline.policies[1] == 1
    _, _, score, timing = pipeline.take(2, 1, lambda: next(draws), last_step=6)
    assert score == "score of 10 10 10 10" and len(scored) == 2  # not scored again
    assert timing["reshard_time_s"] > 0  # theta_1's move, timed in the background, reported with B_4's submission
    rollouts, _, _, timing = pipeline.take(3, 1, lambda: next(draws), last_step=6)  # B_3: nothing moved to group 0
    assert timing["reshard_time_s"] == 0.0 and len(scored) == 3
    pipeline.close()


def test_prefetch_does_not_wait_for_a_batch_still_sampling_nor_look_past_the_last_step():
    pipeline, samplers, _, scored = _pipeline(lag=1)
    draws = _draws()
    pipeline.take(1, 0, lambda: next(draws), last_step=2)
    samplers[0].gate.clear()  # B_2 still sampling
    pipeline.prefetch(2, last_step=2)
    assert len(scored) == 1
    samplers[0].gate.set()
    pipeline.groups[0].in_flight()
    pipeline.prefetch(3, last_step=2)  # past the last step: nothing
    assert len(scored) == 1
    pipeline.prefetch(2, last_step=2)
    assert len(scored) == 2
    pipeline.close()
