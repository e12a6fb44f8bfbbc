"""The reference run of bindings/README.md, in Python (printed like tiny_train.c)."""
from __future__ import annotations

import numpy as np

import ampx


def _values(count: int, numerator, denominator: float) -> np.ndarray:
    # Integer arithmetic, then one division in fp32 (as the recipe says).
    i = np.arange(count, dtype=np.int64)
    return (numerator(i).astype(np.float32) / np.float32(denominator)).astype(np.float32)


def _bits(values) -> list[str]:
    return [f"{b:08x}" for b in np.asarray(values, dtype=np.float32).view(np.uint32).ravel()]


def reference_run() -> list[str]:
    """Runs the 12 steps; returns the output lines."""
    lines = []
    ctx = ampx.Context()
    x = ampx.tensor(_values(32, lambda i: i % 7 - 3, 4).reshape(8, 4), context=ctx)
    y = ampx.tensor(_values(16, lambda i: i % 5 - 2, 2).reshape(8, 2), context=ctx)
    w1 = ampx.tensor(_values(64, lambda i: (i * 37) % 17 - 8, 32).reshape(16, 4), context=ctx,
                     requires_grad=True, name="w1")
    b1 = ampx.tensor(_values(16, lambda i: i % 3 - 1, 100), context=ctx, requires_grad=True,
                     name="b1")
    w2 = ampx.tensor(_values(32, lambda i: (i * 29) % 13 - 6, 32).reshape(2, 16), context=ctx,
                     requires_grad=True, name="w2")
    b2 = ampx.zeros([2], context=ctx, requires_grad=True, name="b2")

    opt = ampx.AdamW([w1, b1, w2, b2], lr=0.01)
    scaler = ampx.Scaler(ctx, init_scale=1024, growth_interval=3)
    autocast = ampx.Autocast(ctx, dtype="bf16")

    for step in range(12):
        with ctx.scope():
            with autocast:
                h = ampx.linear(x, w1, b1, "relu")
                out = ampx.linear(h, w2, b2)
                loss = ampx.mse_loss(out, y, "mean")
            loss_value = loss.numpy()
            ampx.backward(loss, scaler)
            if step == 5:
                grad = w2.grad
                values = grad.numpy()
                values.flat[3] = np.inf
                grad.copy_(values)
            scaler.unscale_(opt)
            ampx.clip_grad_norm_(opt, 1.0, 2.0, error_if_nonfinite=False)
            scaler.step(opt)
            scaler.update()
            scale = scaler.get_scale()
            opt.zero_grad()
        lines.append(f"step {step} loss {_bits(loss_value)[0]} scale {'%.17g' % scale}")
    lines.append("w2 " + " ".join(_bits(w2.numpy())))
    return lines


if __name__ == "__main__":
    print("\n".join(reference_run()))
