"""Backend-neutral RL and preference algorithms, pure numpy or Python, each in a decorator registry:

    advantages.py  @register_advantage("name"): rewards [P*n] -> advantages [P*n]; compute_advantages
    rewards.py     @register_reward("name"): (completion, reference) -> float; REWARD_FUNCTIONS, compute_rewards
    preference.py  @register_preference_loss("name"): DPO-family losses; preference_loss(name)
    learning_signal.py  ZeroGradientWatch: says when every update had grad_norm 0 (equal rewards in every group)
"""
