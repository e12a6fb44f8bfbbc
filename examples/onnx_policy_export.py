"""Trains a small policy with ampx and exports it as ONNX twice: in Unity
ML-Agents' layout and in godot_rl_agents' (ampx.h section 19).

The policy is a tanh MLP (obs -> 64 -> 64 -> actions) trained with AdamW to
imitate a known controller, a = tanh(obs @ K), standing in for the RL
update (the export is the same for a PPO-trained network). Then:

- ML-Agents (the contract of its ONNX exporter, version 3): input
  ``obs_0`` [batch, n]; outputs ``version_number`` = [3],
  ``memory_size`` = [0], ``continuous_actions`` [batch, a],
  ``continuous_action_output_shape`` = [a] and
  ``deterministic_continuous_actions`` [batch, a]. ML-Agents' own
  continuous_actions draws from the Gaussian; ampx has no random op to
  export, so both action outputs are the mean (what the deterministic
  inference option of ML-Agents uses).
- godot_rl_agents (its ONNX inference in ONNX Runtime 1.15's C# package):
  inputs ``obs`` [batch, n] and ``state_ins`` [batch]; outputs ``output``
  [batch, a] and ``state_outs`` (state_ins passed through), opset 17, IR 8.

Not verified here (no Unity or Godot on the build machines): loading in
Unity's Inference Engine and in the Godot plugin's ONNX Runtime 1.15 C#.
ONNX Runtime's Python package (a newer version) runs both files by those
names in the tests.

Run: python3 examples/onnx_policy_export.py OUT_DIR
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

import ampx

OBS, ACTIONS, HIDDEN = 8, 2, 64


def make_policy(ctx, seed: int = 7):
    rng = np.random.default_rng(seed)

    def p(shape, bound, name):
        return ampx.tensor(rng.uniform(-bound, bound, shape).astype(np.float32), context=ctx,
                           requires_grad=True, name=name)

    return {"w1": p((HIDDEN, OBS), 0.35, "policy.l1.weight"), "b1": p((HIDDEN,), 0.1, "policy.l1.bias"),
            "w2": p((HIDDEN, HIDDEN), 0.12, "policy.l2.weight"), "b2": p((HIDDEN,), 0.1, "policy.l2.bias"),
            "w3": p((ACTIONS, HIDDEN), 0.12, "policy.mu.weight"), "b3": p((ACTIONS,), 0.0, "policy.mu.bias")}


def policy_mean(p, obs):
    h = ampx.tanh(ampx.linear(obs, p["w1"], p["b1"]))
    h = ampx.tanh(ampx.linear(h, p["w2"], p["b2"]))
    return ampx.linear(h, p["w3"], p["b3"])


def train(ctx, p, steps: int = 200):
    rng = np.random.default_rng(11)
    gain = rng.normal(0, 0.7, (OBS, ACTIONS)).astype(np.float32)
    opt = ampx.AdamW(list(p.values()), lr=3e-3)
    loss_value = None
    for _ in range(steps):
        obs = rng.uniform(-1, 1, (64, OBS)).astype(np.float32)
        target = ampx.tensor(np.tanh(obs @ gain), context=ctx)
        with ctx.scope():
            loss = ampx.mse_loss(policy_mean(p, ampx.tensor(obs, context=ctx)), target)
            loss.backward()
            loss_value = float(loss.numpy())
        opt.step()
        opt.zero_grad()
    return loss_value


def export_mlagents(ctx, p, path):
    obs = ampx.tensor(np.zeros((1, OBS), np.float32), context=ctx, requires_grad=True)
    with ctx.scope():
        mean = policy_mean(p, obs)
        ampx.onnx.export({"obs_0": obs}, {"continuous_actions": mean,
                                          "deterministic_continuous_actions": mean},
                         path, dynamic_axes={"obs_0": {0: "batch"}},
                         constant_outputs={"version_number": [3.0], "memory_size": [0.0],
                                           "continuous_action_output_shape": [float(ACTIONS)]})


def export_godot(ctx, p, path):
    obs = ampx.tensor(np.zeros((1, OBS), np.float32), context=ctx, requires_grad=True)
    state = ampx.tensor(np.zeros((1,), np.float32), context=ctx, requires_grad=True)
    with ctx.scope():
        ampx.onnx.export({"obs": obs, "state_ins": state},
                         {"output": policy_mean(p, obs), "state_outs": state}, path,
                         dynamic_axes={"obs": {0: "batch"}}, opset_version=17, ir_version=8)


def main(out_dir: str) -> None:
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = ampx.Context()
    p = make_policy(ctx)
    loss = train(ctx, p)
    export_mlagents(ctx, p, out / "policy_mlagents.onnx")
    export_godot(ctx, p, out / "policy_godot.onnx")
    print(f"trained to mse {loss:.4g}; wrote {out / 'policy_mlagents.onnx'} and "
          f"{out / 'policy_godot.onnx'}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "onnx-policies")
