"""The host side of the off-policy pipeline (trainers/pipeline.py OffPolicyRollouts) with stand-in samplers, so
the order is checked without a model: a batch already sampled is decoded and scored by `prefetch` while the
update computes (once, on the calling thread), stays in flight for a checkpoint, and the weight move started by
`after_update` is not waited for within the step but timed in a thread and reported by the next after_update.
The samplers, encoder and placements here are stand-ins (the real ones: tests/maxtext/test_off_policy.py)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

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
        return SampleOutput(prompt_ids=ones, prompt_mask=ones, completion_ids=np.full((ROWS, NEW), 10 + int(policy)),
                            completion_mask=np.ones((ROWS, NEW), np.int32),
                            completion_log_probs=np.zeros((ROWS, NEW), np.float32))


class _Encoder:
    def encode(self, examples):
        return [[1, 1, 1]] * len(examples), 0

    def decode(self, ids, mask):
        return [" ".join(map(str, row)) for row in ids]


class _Weights:
    """Moved weights, ready once `copied` is set (a device copy in flight): jax.block_until_ready waits for that."""

    def __init__(self, version: int, copied: threading.Event):
        self.version, self.copied = version, copied

    def block_until_ready(self):
        self.copied.wait(10)
        return self

    def __int__(self):
        return self.version


class _Placement:
    """policy(params) -> (params, seconds) as RolloutPlacement's; move(params) -> _Weights, counted."""

    def __init__(self):
        self.moves = 0
        self.copied = threading.Event()
        self.copied.set()

    def policy(self, params):
        return params, 0.0

    def move(self, params):
        self.moves += 1
        return _Weights(params, self.copied)


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
    pipeline.start_next(1, lambda: next(draws), last_step=6)  # B_3, unless the take started it (it waited for B_1)
    assert score == "score of 10 10 10 10" and timing["staleness"] == 0.0
    assert timing["prefetch_time_s"] == 0.0 < timing["reward_time_s"]  # decoded and scored on the step's path
    assert scored[-1][1] is threading.main_thread()
    pipeline.groups[1].in_flight()  # B_2 sampled
    pipeline.prefetch(2, last_step=6)  # while update 1 would compute
    assert len(scored) == 2 and scored[-1][1] is threading.main_thread()
    arrays, state = pipeline.checkpoint_part()  # B_2 (prefetched) and B_3: both still in flight
    assert sorted(state) == ["in_flight", "in_flight_2", "rollout_lag"] and state["in_flight"]["references"] == ["1", "1"]
    placements[1].copied.clear()  # theta_1's copy to group 1 stays in flight: nothing in the step may wait for it
    started = time.perf_counter()
    assert pipeline.after_update(1, 1, last_step=6) == {"reshard_time_s": 0.0}  # theta_1 -> group 1 (B_4 next)
    assert placements[1].moves == 1 and int(pipeline.policies[1]) == 1
    _, _, score, timing = pipeline.take(2, 1, lambda: next(draws), last_step=6)
    assert score == "score of 10 10 10 10" and len(scored) == 2  # not scored again
    assert timing["reward_time_s"] == 0.0 < timing["prefetch_time_s"]  # done while update 1 computed
    pipeline.start_next(2, lambda: next(draws), last_step=6)  # hands B_4 to group 1 with the weights still moving
    pipeline.prefetch(3, last_step=6)
    assert time.perf_counter() - started < 5  # take, start_next and prefetch did not wait for the copy
    placements[1].copied.set()
    assert pipeline.after_update(2, 2, last_step=6)["reshard_time_s"] > 0  # theta_1's move, timed in a thread
    assert len(scored) == 3  # B_3 (sampled at once here) scored by prefetch(3)
    _, _, _, timing = pipeline.take(3, 2, lambda: next(draws), last_step=6)
    assert len(scored) == 3 and timing["reward_time_s"] == 0.0 < timing["prefetch_time_s"]
    pipeline.close()


def test_prefetch_waits_for_the_batch_only_while_the_update_computes():
    pipeline, samplers, _, scored = _pipeline(lag=1)
    draws = _draws()
    samplers[0].gate.clear()  # B_1 .. still sampling when taken: B_2 starts at once
    threading.Timer(0.2, samplers[0].gate.set).start()
    pipeline.take(1, 0, lambda: next(draws), last_step=3)
    samplers[0].gate.clear()  # B_2 still sampling
    pipeline.prefetch(2, last_step=3)
    assert len(scored) == 1
    update = threading.Event()
    update.set()
    pipeline.prefetch(2, last_step=3, until=pipeline.watch(_Weights(1, update), 0.0))  # the update is done: no wait
    assert len(scored) == 1
    update.clear()
    threading.Timer(0.2, samplers[0].gate.set).start()  # B_2 finishes while the update still computes
    started = time.perf_counter()
    updated = pipeline.watch(_Weights(1, update), started)
    pipeline.prefetch(2, last_step=3, until=updated)
    assert len(scored) == 2
    time.sleep(0.1)
    update.set()
    assert updated.result() >= 0.25  # the update's time, from its dispatch to its arrays ready
    pipeline.take(2, 1, lambda: next(draws), last_step=3)
    assert len(scored) == 2
    pipeline.close()


def test_prefetch_does_not_look_past_the_last_step():
    pipeline, samplers, _, scored = _pipeline(lag=1)
    draws = _draws()
    pipeline.take(1, 0, lambda: next(draws), last_step=2)
    pipeline.start_next(1, lambda: next(draws), last_step=2)
    pipeline.groups[0].in_flight()  # B_2 sampled
    pipeline.prefetch(3, last_step=2)  # past the last step: nothing
    assert len(scored) == 1
    pipeline.prefetch(2, last_step=2)
    assert len(scored) == 2
    pipeline.close()


def test_a_batch_sampled_before_its_take_hands_on_its_group_after_the_update_starts_in_draw_order():
    pipeline, samplers, _, _ = _pipeline(lag=1)
    draws = _draws()
    samplers[0].gate.clear()
    threading.Timer(0.2, samplers[0].gate.set).start()
    pipeline.take(1, 0, lambda: next(draws), last_step=4)  # waited for B_1: B_2 started at once
    assert pipeline.groups[0].busy
    pipeline.groups[0].in_flight()  # B_2 sampled before its take: the update is the longer side
    pipeline.take(2, 0, lambda: next(draws), last_step=4)
    assert not pipeline.groups[0].busy  # B_3 waits for start_next (the update's dispatch first)
    pipeline.start_next(2, lambda: next(draws), last_step=4)
    assert pipeline.groups[0].busy
    pipeline.groups[0].in_flight()
    pipeline.take(3, 0, lambda: next(draws), last_step=4)  # nobody called start_next: the next take starts B_4
    rollouts, _, _, _ = pipeline.take(4, 0, lambda: next(draws), last_step=4)
    assert rollouts.references == ["3", "3"]  # B_4 is the fourth draw
    pipeline.close()


def test_a_failed_weight_move_is_raised_once_at_close_and_the_timer_threads_end():
    pipeline, _, placements, _ = _pipeline(lag=1)
    draws = _draws()
    pipeline.take(1, 0, lambda: next(draws), last_step=4)
    pipeline.start_next(1, lambda: next(draws), last_step=4)

    placements[0].move = lambda params: _Failing()
    pipeline.after_update(1, 1, last_step=4)
    with pytest.raises(RuntimeError, match="the copy failed"):
        pipeline.close()
    pipeline.close()  # the runtime's cleanup closes again: nothing left to raise
    assert pipeline._move_timer._shutdown and pipeline._update_timer._shutdown


class _Failing:
    """Moved weights whose copy fails (jax.block_until_ready raises)."""

    def block_until_ready(self):
        raise RuntimeError("the copy failed")


def test_during_the_update_the_next_batch_starts_and_the_one_after_is_scored_before_the_update_ends():
    """The trainer's order (grpo._train_step): take B_t, dispatch update t (its first program dispatched:
    start_next), then during_update."""
    pipeline, samplers, _, scored = _pipeline(lag=1)
    draws = _draws()
    pipeline.take(1, 0, lambda: next(draws), last_step=3)
    pipeline.start_next(1, lambda: next(draws), last_step=3)
    pipeline.groups[0].in_flight()  # B_2 sampled before its take: its group waits for the update's dispatch
    pipeline.take(2, 0, lambda: next(draws), last_step=3)
    assert not pipeline.groups[0].busy
    update = threading.Event()
    threading.Timer(0.3, update.set).start()
    pipeline.start_next(2, lambda: next(draws), last_step=3)
    updated = pipeline.during_update(2, _Weights(1, update), last_step=3,
                                     started=time.perf_counter())
    assert len(scored) == 3 and not updated.done()  # B_3 started, sampled and scored before update 2 ended
    assert updated.result() >= 0.2
    pipeline.close()


def test_the_trainer_hands_the_update_the_start_of_its_next_batch():
    """grpo._train_step passes PolicyUpdate.start a `dispatched` hook that starts B_{step+L} (start_next): on CPU the
    rollout is the longer side, so a run would start it at the next take anyway and no end-to-end test sees the hook."""
    from framework.backends.maxtext.trainers.grpo import GRPOTrainer

    class Dispatched(Exception):
        pass

    started = []

    def start(params, opt_state, ref_params, arrays, dispatched=None):
        assert dispatched is not None, "the trainer gave the update no hook"
        dispatched()
        raise Dispatched  # the rest of the step is the other tests'

    ones = np.ones((ROWS, PROMPT + NEW), np.int32)
    rollouts = SimpleNamespace(input_ids=ones, attention_mask=ones, completion_mask=ones[:, NEW:],
                               behaviour_log_probs=None)
    off_policy = SimpleNamespace(take=lambda *args: (rollouts, 0, (None, {}, np.zeros(ROWS)), {}),
                                 start_next=lambda *args: started.append(args))
    trainer = SimpleNamespace(config=SimpleNamespace(task=SimpleNamespace(steps=5)), off_policy=off_policy,
                              params=0, opt_state=0, ref_params=None, update=SimpleNamespace(start=start),
                              _draw=object())
    with pytest.raises(Dispatched):
        GRPOTrainer._train_step(trainer, 3)
    assert started == [(3, trainer._draw, 5)]
