"""(3) ampx's scaler + AdamW + clipping against torch.amp.GradScaler("cpu") + AdamW.

Both sides train the same fp32 MLP (no autocast), with infs injected into a
gradient at steps 3, 4 and 8 (two consecutive overflows, then one more).
The loss scales are powers of two, so scaling and unscaling are exact on
both sides; the only differences left are the summation orders of the
matrix products and reductions (and ampx's fp32 vs torch's double bias
corrections). Hence: the scale sequence and the skipped steps must be
identical; losses, gradient norms and parameters must agree within
1e-5 (relative for losses and norms, absolute for parameters of order 1)
-- observed differences are about 1e-7.
"""
import math
import unittest

import numpy as np
import torch
import torch.nn.functional as F

import ampx

STEPS = 12
INJECT = {3, 4, 8}
TOLERANCE = 1e-5


class TorchParityTest(unittest.TestCase):
    def test_scaler_adamw_clipping_match_torch(self):
        rng = np.random.default_rng(7)
        shapes = {"w1": (32, 8), "b1": (32,), "w2": (4, 32), "b2": (4,)}
        init = {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in shapes.items()}
        x = rng.standard_normal((16, 8)).astype(np.float32)
        y = rng.standard_normal((16, 4)).astype(np.float32)

        ctx = ampx.Context()
        params = {k: ampx.tensor(v, context=ctx, requires_grad=True, name=k)
                  for k, v in init.items()}
        ax, ay = ampx.tensor(x, context=ctx), ampx.tensor(y, context=ctx)
        opt = ampx.AdamW(list(params.values()), lr=0.01)
        scaler = ampx.Scaler(ctx, init_scale=1024.0, growth_interval=2)

        tparams = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
        tx, ty = torch.tensor(x), torch.tensor(y)
        topt = torch.optim.AdamW(list(tparams.values()), lr=0.01)
        tscaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)

        scales, tscales, taken, ttaken = [], [], [], []
        for step in range(STEPS):
            with ctx.scope():
                hidden = ampx.linear(ax, params["w1"], params["b1"], "relu")
                loss = ampx.mse_loss(ampx.linear(hidden, params["w2"], params["b2"]), ay)
                loss.backward(scaler)
                if step in INJECT:
                    grad = params["w2"].grad
                    values = grad.numpy()
                    values[0, 3] = np.inf
                    grad.copy_(values)
                scaler.unscale_(opt)
                norm = ampx.clip_grad_norm_(opt, 1.0).item()
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
            scales.append(scaler.get_scale())
            taken.append(opt.last_step_taken())

            topt.zero_grad()
            thidden = torch.relu(F.linear(tx, tparams["w1"], tparams["b1"]))
            tloss = F.mse_loss(F.linear(thidden, tparams["w2"], tparams["b2"]), ty)
            tscaler.scale(tloss).backward()
            if step in INJECT:
                with torch.no_grad():
                    tparams["w2"].grad[0, 3] = math.inf
            tscaler.unscale_(topt)
            tnorm = torch.nn.utils.clip_grad_norm_(list(tparams.values()), 1.0).item()
            before = self._torch_steps(topt, tparams["w1"])
            tscaler.step(topt)
            tscaler.update()
            tscales.append(tscaler.get_scale())
            ttaken.append(self._torch_steps(topt, tparams["w1"]) > before)

            with self.subTest(step=step):
                self.assertLessEqual(abs(loss.item() - tloss.item()),
                                     TOLERANCE * abs(tloss.item()))
                if math.isfinite(tnorm):
                    self.assertLessEqual(abs(norm - tnorm), TOLERANCE * tnorm)
                else:
                    self.assertFalse(math.isfinite(norm))
                for name, p in params.items():
                    np.testing.assert_allclose(p.numpy(), tparams[name].detach().numpy(),
                                               rtol=0, atol=TOLERANCE, err_msg=name)

        self.assertEqual(scales, tscales)
        self.assertEqual(taken, ttaken)
        self.assertEqual([s for s in range(STEPS) if not taken[s]], sorted(INJECT))
        self.assertEqual(opt.param_steps(params["w1"]), STEPS - len(INJECT))
        counters = scaler.counters()
        self.assertEqual((counters.updates, counters.skipped), (STEPS, len(INJECT)))

    @staticmethod
    def _torch_steps(optimizer, param) -> int:
        state = optimizer.state.get(param, {})
        return int(state["step"].item()) if "step" in state else 0


if __name__ == "__main__":
    unittest.main()
