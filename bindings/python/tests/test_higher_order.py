"""ampx.grad, backward's retain_graph/create_graph, Scaler.unscale_tensor
(issue 41) and bce_with_logits' weight/pos_weight (issue 43).

References are computed here in double precision: closed forms (d/dx x^3 =
3x^2, d2/dx2 = 6x, d3/dx3 = 6), central differences of an MLP's gradient
(itself written out in NumPy) for Hessian-vector products, torch's formula
for the weighted binary cross-entropy, and torch itself.

Tolerances. ampx computes in fp32: a handful of roundings of 2^-24 per
element, so 1e-5 relative to the values' size for the closed forms and
the loss. The Hessian-vector product sums a few dozen fp32 products along
each path; 1e-4 of the largest element covers it, while a missing term of a
second-derivative formula is off by O(1) of it. The central difference in
double (eps 1e-4) is exact to ~eps^2 * f''' ~ 1e-8.
"""
import unittest

import numpy as np
import torch
import torch.nn.functional as F

import ampx


def _f32(rng, *shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, shape).astype(np.float32)


class GradTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()
        self.x0 = np.array([-1.5, -0.25, 0.5, 2.0], dtype=np.float32)

    def leaf(self, values, name=None):
        return ampx.tensor(values, context=self.ctx, requires_grad=True, name=name)

    def test_derivatives_of_x_cubed_to_third_order(self):
        x = self.leaf(self.x0, "x")
        x64 = self.x0.astype(np.float64)
        for cube in (x * x * x, ampx.pow(x, 3.0)):
            (g,) = ampx.grad(cube.sum(), x, create_graph=True)
            self.assertTrue(g.requires_grad)
            np.testing.assert_allclose(g.numpy(), 3 * x64 ** 2, rtol=1e-5, atol=1e-6)
            (h,) = ampx.grad(g.sum(), [x], create_graph=True)
            np.testing.assert_allclose(h.numpy(), 6 * x64, rtol=1e-5, atol=1e-6)
            (t,) = ampx.grad(h.sum(), (x,))
            np.testing.assert_allclose(t.numpy(), np.full(4, 6.0), rtol=1e-5)
            # ampx.grad accumulates into no .grad
            self.assertIsNone(x.grad)

    def test_results_are_tuples_of_new_tensors_that_outlive_the_scope(self):
        x, w = self.leaf(self.x0), self.leaf(np.float32(3.0))
        with self.ctx.scope():
            y = ampx.mul(ampx.tanh(x), w)
            unused = ampx.tanh(x)  # y used another tanh of x
            grads = ampx.grad([y.sum()], [x, w, unused], allow_unused=True)
        self.assertIsInstance(grads, tuple)
        self.assertEqual(len(grads), 3)
        t = np.tanh(self.x0.astype(np.float64))
        np.testing.assert_allclose(grads[0].numpy(), 3 * (1 - t * t), rtol=1e-5)
        self.assertEqual(grads[1].shape, ())
        np.testing.assert_allclose(grads[1].numpy(), t.sum(), rtol=1e-5)
        self.assertIsNone(grads[2])

    def test_intermediate_inputs_and_grad_outputs(self):
        x = self.leaf(self.x0)
        h = ampx.tanh(x)
        y = ampx.mul(h, h)  # non-scalar
        v = np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)
        gv = ampx.tensor(v, context=self.ctx)
        dh, dx = ampx.grad(y, [h, x], grad_outputs=gv)
        t = np.tanh(self.x0.astype(np.float64))
        np.testing.assert_allclose(dh.numpy(), 2 * t * v, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(dx.numpy(), 2 * t * (1 - t * t) * v, rtol=1e-5, atol=1e-6)

    def test_allow_unused_gives_none(self):
        x, z = self.leaf(self.x0), self.leaf(self.x0)
        loss = ampx.sum(ampx.mul(x, x))
        with self.assertRaises(ampx.InvalidArgumentError) as caught:
            ampx.grad(loss, [x, z], retain_graph=True)
        self.assertIn("inputs[1]", str(caught.exception))
        self.assertIn("allow_unused", str(caught.exception))
        gx, gz = ampx.grad(loss, [x, z], allow_unused=True)
        self.assertIsNone(gz)
        np.testing.assert_allclose(gx.numpy(), 2 * self.x0, rtol=1e-6)

    def test_bad_input_raises_the_bindings_errors(self):
        x = self.leaf(self.x0)
        y = ampx.tanh(x)  # four elements
        with self.assertRaises(ampx.ShapeError) as caught:
            ampx.grad(y, x)
        self.assertIn("grad_outputs", str(caught.exception))
        with self.assertRaises(ampx.ShapeError):
            ampx.grad(y, x, grad_outputs=ampx.zeros([3], context=self.ctx))
        with self.assertRaises(ampx.DTypeError):
            ampx.grad(y, x, grad_outputs=ampx.zeros([4], ampx.F16, context=self.ctx))
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.grad(y, x, grad_outputs=[None, None])
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.grad(y, [x, 3.0])
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.grad(y, x, grad_outputs=[np.ones(4)])
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.grad(y.sum(), [])
        with self.assertRaises(ampx.InvalidArgumentError):  # does not require grad
            ampx.grad(y.sum(), ampx.tensor(self.x0, context=self.ctx))
        closed = self.leaf(self.x0)
        closed.close()
        with self.assertRaises(ampx.StaleHandleError):
            ampx.grad(y.sum(), closed)
        # Nothing was freed by the failures: the graph still runs.
        (g,) = ampx.grad(y, x, grad_outputs=[ampx.tensor(np.ones(4, np.float32),
                                                         context=self.ctx)])
        t = np.tanh(self.x0.astype(np.float64))
        np.testing.assert_allclose(g.numpy(), 1 - t * t, rtol=1e-5)

    def test_without_create_graph_results_are_not_differentiable(self):
        x = self.leaf(self.x0)
        (g,) = ampx.grad(ampx.sum(x * x * x), x)
        self.assertFalse(g.requires_grad)
        np.testing.assert_allclose(g.numpy(), 3 * self.x0.astype(np.float64) ** 2, rtol=1e-5)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.grad(g.sum(), x)

    def test_retain_graph(self):
        x = self.leaf(self.x0)
        loss = ampx.sum(ampx.tanh(x))
        first = ampx.grad(loss, x, retain_graph=True)[0].numpy()
        second = ampx.grad(loss, x)[0].numpy()  # retain_graph defaults to create_graph
        np.testing.assert_array_equal(first, second)
        with self.assertRaises(ampx.OrderError) as caught:
            ampx.grad(loss, x)
        self.assertIn("retain_graph", str(caught.exception))
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.grad(loss, x, retain_graph="yes")

    def test_backward_retain_graph_and_create_graph(self):
        x = self.leaf(self.x0)
        x64 = self.x0.astype(np.float64)
        loss = ampx.sum(x * x * x)
        loss.backward(retain_graph=True)
        loss.backward()  # accumulates: twice 3x^2
        np.testing.assert_allclose(x.grad.numpy(), 6 * x64 ** 2, rtol=1e-5)
        with self.assertRaises(ampx.OrderError):
            loss.backward(retain_graph=False)

        y = self.leaf(self.x0)
        ampx.backward(ampx.sum(y * y * y), create_graph=True)
        gy = y.grad
        self.assertTrue(gy.requires_grad)
        np.testing.assert_allclose(gy.numpy(), 3 * x64 ** 2, rtol=1e-5)
        (h,) = ampx.grad(gy.sum(), y)
        np.testing.assert_allclose(h.numpy(), 6 * x64, rtol=1e-5, atol=1e-6)

    def test_hessian_vector_product_of_a_small_mlp(self):
        rng = np.random.default_rng(41)
        shapes = [(5, 3), (5,), (2, 5), (2,)]
        params0 = [_f32(rng, *s, low=-0.8, high=0.8) for s in shapes]
        vecs = [_f32(rng, *s) for s in shapes]
        xb, yb = _f32(rng, 6, 3), _f32(rng, 6, 2)

        params = [self.leaf(p) for p in params0]
        x, y = ampx.tensor(xb, context=self.ctx), ampx.tensor(yb, context=self.ctx)
        hidden = ampx.tanh(ampx.linear(x, params[0], params[1]))
        loss = ampx.mse_loss(ampx.linear(hidden, params[2], params[3]), y)
        grads = ampx.grad(loss, params, create_graph=True)
        dot = None
        for g, v in zip(grads, vecs):
            term = ampx.sum(ampx.mul(g, ampx.tensor(v, context=self.ctx)))
            dot = term if dot is None else dot + term
        hv = ampx.grad(dot, params)

        def gradient(p):  # the MLP's gradient in double, written out
            w1, b1, w2, b2 = p
            a = np.tanh(xb @ w1.T + b1)
            out = a @ w2.T + b2
            d_out = 2 * (out - yb) / out.size
            d_a = d_out @ w2 * (1 - a * a)
            return [d_a.T @ xb, d_a.sum(0), d_out.T @ a, d_out.sum(0)]

        eps = 1e-4
        p64 = [p.astype(np.float64) for p in params0]
        plus = gradient([p + eps * v for p, v in zip(p64, vecs)])
        minus = gradient([p - eps * v for p, v in zip(p64, vecs)])
        want = [(a - b) / (2 * eps) for a, b in zip(plus, minus)]
        scale = max(np.abs(w).max() for w in want)
        self.assertGreater(scale, 1e-2)
        for have, w in zip(hv, want):
            np.testing.assert_allclose(have.numpy(), w, rtol=0, atol=1e-4 * scale)
        for have, w in zip(grads, gradient(p64)):
            np.testing.assert_allclose(have.numpy(), w, rtol=0, atol=1e-5)

        # torch's double-backward of the same network agrees too.
        tp = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params0]
        tl = F.mse_loss(F.linear(torch.tanh(F.linear(torch.tensor(xb, dtype=torch.float64),
                                                     tp[0], tp[1])), tp[2], tp[3]),
                        torch.tensor(yb, dtype=torch.float64))
        tg = torch.autograd.grad(tl, tp, create_graph=True)
        ths = torch.autograd.grad(sum((g * torch.tensor(v, dtype=torch.float64)).sum()
                                      for g, v in zip(tg, vecs)), tp)
        for have, w in zip(hv, ths):
            np.testing.assert_allclose(have.numpy(), w.numpy(), rtol=0, atol=1e-4 * scale)


class UnscaleTensorTest(unittest.TestCase):
    def test_unscale_tensor_is_recorded_and_exact(self):
        ctx = ampx.Context()
        scaler = ampx.Scaler(ctx, init_scale=1024.0)
        x0 = np.array([-1.0, 0.25, 0.75], dtype=np.float32)
        x = ampx.tensor(x0, context=ctx, requires_grad=True)
        scaled = scaler.scale(ampx.sum(ampx.tanh(x)))
        self.assertTrue(scaled.requires_grad)
        (g,) = ampx.grad(scaled, x, create_graph=True)
        u = scaler.unscale_tensor(g)
        self.assertEqual((u.shape, u.dtype), (g.shape, g.dtype))
        t = np.tanh(x0.astype(np.float64))
        np.testing.assert_allclose(g.numpy(), 1024 * (1 - t * t), rtol=1e-6)
        np.testing.assert_allclose(u.numpy(), 1 - t * t, rtol=1e-6)
        (h,) = ampx.grad(u.sum(), x)
        np.testing.assert_allclose(h.numpy(), -2 * t * (1 - t * t), rtol=1e-5)
        with self.assertRaises(ampx.ArgumentTypeError):
            scaler.unscale_tensor(None)
        with self.assertRaises(ampx.DTypeError):
            scaler.unscale_tensor(ampx.tensor(np.arange(3), context=ctx))
        disabled = ampx.Scaler(ctx, enabled=False)
        np.testing.assert_array_equal(disabled.unscale_tensor(g).numpy(), g.numpy())


class GradientPenaltyTest(unittest.TestCase):
    """torch's AMP gradient-penalty recipe, step by step on both sides.

    fp32 (no autocast) with power-of-two scales, so scaling and unscaling
    are exact and the two differ only in summation orders: parameters agree
    within 2e-5 after the steps (observed ~1e-7), the scale sequences and
    skipped steps exactly. The first step's scale, 2^127, makes the scaled
    gradients overflow fp32 on both sides (the largest is > 2 unscaled; the
    sum reduction sees to that), so the penalty is inf, the step is skipped
    and the scale backs off by 2^-24 to 2^103, far from any boundary, where
    the next steps are taken.
    """

    STEPS, LAMBDA, LR = 4, 0.05, 0.002

    def test_recipe_matches_torch(self):
        rng = np.random.default_rng(43)
        shapes = [(8, 4), (8,), (1, 8), (1,)]
        init = [_f32(rng, *s, low=-0.7, high=0.7) for s in shapes]
        xb, yb = _f32(rng, 16, 4), _f32(rng, 16, 1)
        scaler_args = dict(init_scale=2.0 ** 127, backoff_factor=2.0 ** -24, growth_interval=2)

        ctx = ampx.Context()
        params = [ampx.tensor(p, context=ctx, requires_grad=True) for p in init]
        x, y = ampx.tensor(xb, context=ctx), ampx.tensor(yb, context=ctx)
        opt = ampx.SGD(params, lr=self.LR)
        scaler = ampx.Scaler(ctx, **scaler_args)
        scales, taken = [], []
        for _ in range(self.STEPS):
            with ctx.scope():
                hidden = ampx.tanh(ampx.linear(x, params[0], params[1]))
                loss = ampx.mse_loss(ampx.linear(hidden, params[2], params[3]), y, "sum")
                grads = ampx.grad(scaler.scale(loss), params, create_graph=True)
                penalty = None
                for g in grads:
                    u = scaler.unscale_tensor(g)
                    term = ampx.sum(ampx.mul(u, u))
                    penalty = term if penalty is None else penalty + term
                total = loss + penalty * self.LAMBDA
                total.backward(scaler)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
            taken.append(opt.last_step_taken())
            scales.append(scaler.get_scale())

        tparams = [torch.tensor(p, requires_grad=True) for p in init]
        tx, ty = torch.tensor(xb), torch.tensor(yb)
        topt = torch.optim.SGD(tparams, lr=self.LR)
        tscaler = torch.amp.GradScaler("cpu", **scaler_args)
        tscales, ttaken = [], []
        for _ in range(self.STEPS):
            before = [p.detach().clone() for p in tparams]
            hidden = torch.tanh(F.linear(tx, tparams[0], tparams[1]))
            loss = F.mse_loss(F.linear(hidden, tparams[2], tparams[3]), ty, reduction="sum")
            grads = torch.autograd.grad(tscaler.scale(loss), tparams, create_graph=True)
            inv_scale = 1.0 / tscaler.get_scale()
            penalty = sum((g * inv_scale).pow(2).sum() for g in grads)
            tscaler.scale(loss + self.LAMBDA * penalty).backward()
            tscaler.step(topt)
            tscaler.update()
            topt.zero_grad()
            ttaken.append(any(not torch.equal(b, p) for b, p in zip(before, tparams)))
            tscales.append(tscaler.get_scale())

        self.assertEqual(ttaken, [False, True, True, True])  # the recipe's premise
        self.assertEqual(taken, ttaken)
        self.assertEqual(scales, tscales)
        self.assertEqual(scaler.counters().skipped, 1)
        for p, tp, p0 in zip(params, tparams, init):
            self.assertGreater(np.abs(p.numpy() - p0).max(), 1e-4)  # it trained
            np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=0, atol=2e-5)


class WeightedBceTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(430)
        self.ctx = ampx.Context()
        self.x = _f32(rng, 4, 3, low=-4.0, high=4.0)
        self.t = np.array([[0, 1, 0.25], [1, 1, 0], [0.5, 0, 1], [0, 0.75, 1]], np.float32)
        self.weights = {"none": None, "[4,1]": _f32(rng, 4, 1, low=0.1, high=2.0),
                        "[3]": _f32(rng, 3, low=0.1, high=2.0),
                        "[4,3]": _f32(rng, 4, 3, low=0.1, high=2.0),
                        "0-D": np.float32(1.75)}
        self.pos_weights = {"none": None, "[3]": np.array([0.5, 3.0, 1.5], np.float32),
                            "[1,3]": np.array([[2.0, 0.25, 1.0]], np.float32)}

    @staticmethod
    def reference(x, t, w, p, reduction):
        """Loss, d/dlogits and d/dtargets of torch's formula, in double, for
        an output gradient of ones."""
        x, t = x.astype(np.float64), t.astype(np.float64)
        w = np.ones_like(x) if w is None else np.broadcast_to(np.float64(w), x.shape)
        p = np.ones_like(x) if p is None else np.broadcast_to(np.float64(p), x.shape)
        log_sig = -np.log1p(np.exp(-np.abs(x))) + np.minimum(x, 0)  # log sigmoid(x)
        log_sig_neg = log_sig - x                                     # log sigmoid(-x)
        loss = -w * (p * t * log_sig + (1 - t) * log_sig_neg)
        sig = 1 / (1 + np.exp(-x))
        d_x = w * ((1 + (p - 1) * t) * sig - p * t)
        d_t = w * (log_sig_neg - p * log_sig)
        if reduction == "none":
            return loss, d_x, d_t
        n = 1.0 if reduction == "sum" else x.size
        return np.array(loss.sum() / n), d_x / n, d_t / n

    def test_against_double_reference_and_torch(self):
        cases = 0
        for wname, w in self.weights.items():
            for pname, p in self.pos_weights.items():
                for reduction in ("mean", "sum", "none"):
                    what = f"weight {wname}, pos_weight {pname}, {reduction}"
                    logits = ampx.tensor(self.x, context=self.ctx, requires_grad=True)
                    targets = ampx.tensor(self.t, context=self.ctx, requires_grad=True)
                    aw = None if w is None else ampx.tensor(w, context=self.ctx)
                    ap = None if p is None else ampx.tensor(p, context=self.ctx)
                    out = ampx.bce_with_logits(logits, targets, reduction, weight=aw,
                                               pos_weight=ap)
                    self.assertEqual(out.dtype, ampx.F32, what)
                    ampx.sum(out).backward()
                    loss, d_x, d_t = self.reference(self.x, self.t, w, p, reduction)
                    np.testing.assert_allclose(out.numpy(), loss, rtol=1e-5, atol=1e-6,
                                               err_msg=what)
                    np.testing.assert_allclose(logits.grad.numpy(), d_x, rtol=1e-5, atol=1e-6,
                                               err_msg=what)
                    np.testing.assert_allclose(targets.grad.numpy(), d_t, rtol=1e-5,
                                               atol=1e-6, err_msg=what)

                    tx = torch.tensor(self.x, requires_grad=True)
                    tt = torch.tensor(self.t, requires_grad=True)
                    tout = F.binary_cross_entropy_with_logits(
                        tx, tt, None if w is None else torch.tensor(w), reduction=reduction,
                        pos_weight=None if p is None else torch.tensor(p))
                    tout.sum().backward()
                    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5,
                                               atol=1e-6, err_msg=what)
                    np.testing.assert_allclose(logits.grad.numpy(), tx.grad.numpy(), rtol=1e-5,
                                               atol=1e-6, err_msg=what)
                    np.testing.assert_allclose(targets.grad.numpy(), tt.grad.numpy(),
                                               rtol=1e-5, atol=1e-6, err_msg=what)
                    cases += 1
        self.assertEqual(cases, 45)

    def test_create_graph_matches_first_order_and_torch(self):
        # Issue 51: the create_graph formula dropped weight and pos_weight.
        # Every option, with and without create_graph: the gradients equal
        # torch.autograd.grad's, and (create_graph) so do the second
        # derivatives d/dx sum(dL/dx * v) and d/dt sum(dL/dt * v).
        rng = np.random.default_rng(51)
        v = _f32(rng, *self.x.shape)
        cases = 0
        for wname, w in self.weights.items():
            for pname, p in self.pos_weights.items():
                for reduction in ("mean", "sum", "none"):
                    tx = torch.tensor(self.x, requires_grad=True)
                    tt = torch.tensor(self.t, requires_grad=True)
                    tout = F.binary_cross_entropy_with_logits(
                        tx, tt, None if w is None else torch.tensor(w), reduction=reduction,
                        pos_weight=None if p is None else torch.tensor(p)).sum()
                    tgx, tgt = torch.autograd.grad(tout, (tx, tt), create_graph=True)
                    tv = torch.tensor(v)
                    thx = torch.autograd.grad((tgx * tv).sum(), (tx, tt), retain_graph=True,
                                              allow_unused=True, materialize_grads=True)
                    tht = torch.autograd.grad((tgt * tv).sum(), (tx, tt), allow_unused=True,
                                              materialize_grads=True)
                    for create_graph in (False, True):
                        what = f"weight {wname}, pos_weight {pname}, {reduction}, " \
                               f"create_graph {create_graph}"
                        logits = ampx.tensor(self.x, context=self.ctx, requires_grad=True)
                        targets = ampx.tensor(self.t, context=self.ctx, requires_grad=True)
                        aw = None if w is None else ampx.tensor(w, context=self.ctx)
                        ap = None if p is None else ampx.tensor(p, context=self.ctx)
                        out = ampx.sum(ampx.bce_with_logits(logits, targets, reduction,
                                                            weight=aw, pos_weight=ap))
                        gx, gt = ampx.grad(out, [logits, targets], create_graph=create_graph)
                        for have, want in ((gx, tgx), (gt, tgt)):
                            np.testing.assert_allclose(have.numpy(), want.detach().numpy(),
                                                       rtol=1e-5, atol=1e-6, err_msg=what)
                        if not create_graph:
                            continue
                        av = ampx.tensor(v, context=self.ctx)
                        hx = ampx.grad(ampx.sum(ampx.mul(gx, av)), [logits, targets],
                                       retain_graph=True, allow_unused=True)
                        ht = ampx.grad(ampx.sum(ampx.mul(gt, av)), [logits, targets],
                                       allow_unused=True)
                        for have, want in zip(hx + ht, thx + tht):
                            got = np.zeros(self.x.shape) if have is None else have.numpy()
                            np.testing.assert_allclose(got, want.numpy(), rtol=1e-4,
                                                       atol=1e-5, err_msg=what)
                    cases += 1
        self.assertEqual(cases, 45)

    def test_weights_are_constants_of_any_floating_type(self):
        logits = ampx.tensor(self.x, context=self.ctx, requires_grad=True)
        targets = ampx.tensor(self.t, context=self.ctx)
        w = ampx.tensor(self.weights["[3]"], context=self.ctx, requires_grad=True)
        p16 = ampx.tensor(self.pos_weights["[3]"], ampx.BF16, context=self.ctx)
        out = ampx.bce_with_logits(logits, targets, "sum", weight=w, pos_weight=p16)
        out.backward()
        self.assertIsNone(w.grad)
        # bf16 holds these pos_weights exactly.
        loss, d_x, _ = self.reference(self.x, self.t, self.weights["[3]"],
                                      self.pos_weights["[3]"], "sum")
        np.testing.assert_allclose(out.item(), float(loss), rtol=1e-5)
        np.testing.assert_allclose(logits.grad.numpy(), d_x, rtol=1e-5, atol=1e-6)

    def test_bad_weights(self):
        logits = ampx.tensor(self.x, context=self.ctx)
        targets = ampx.tensor(self.t, context=self.ctx)
        with self.assertRaises(ampx.ShapeError):
            ampx.bce_with_logits(logits, targets, weight=ampx.zeros([4], context=self.ctx))
        with self.assertRaises(ampx.ShapeError):
            ampx.bce_with_logits(logits, targets, pos_weight=ampx.zeros([2, 3], context=self.ctx))
        with self.assertRaises(ampx.DTypeError):
            ampx.bce_with_logits(logits, targets,
                                 weight=ampx.tensor(np.arange(3), context=self.ctx))
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.bce_with_logits(logits, targets, weight=np.ones(3, np.float32))
        other = ampx.Context()
        with self.assertRaises(ampx.DeviceError):
            ampx.bce_with_logits(logits, targets, weight=ampx.zeros([3], context=other))
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.bce_with_logits(logits, targets, "avg", weight=ampx.zeros([3], context=self.ctx))


if __name__ == "__main__":
    unittest.main()
