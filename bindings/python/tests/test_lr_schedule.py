"""Learning-rate schedules on the device against torch.optim.lr_scheduler.

Each ampx schedule is compared, step by step for 1000 steps, with the
torch composition it documents: a warm-up LinearLR (or a LambdaLR for a
warm-up from 0, which LinearLR refuses) joined by SequentialLR to LinearLR,
CosineAnnealingLR, StepLR or a constant. Two things are checked at every
step: ``LRSchedule.value`` (the code the device runs) equals torch's rate
to 1e-12 relative (torch's schedulers update recursively, which drifts by
a few ulps of a double), and an SGD parameter with a gradient of ones
moves on the device by exactly the fp32 rounding of that rate, matching a
torch.optim.SGD parameter stepped by the same torch schedule to within a
rounding of the rate. Then a run with a scaler whose skipped steps (inf
gradients) do not advance the schedule, matching torch where neither the
optimizer nor the scheduler steps after a skipped scaler step; the state dict carrying the count;
and bad schedules refused with nothing changed.
"""
import math
import unittest

import numpy as np
import torch

import ampx

STEPS = 1000
BASE = 0.05


def torch_schedulers(opt, decay, warmup, start, total, end_factor=0.0, min_lr=0.0,
                     step_size=1, gamma=0.1):
    """The torch scheduler for an ampx schedule, as ampx.h section 17 states it."""
    sched = torch.optim.lr_scheduler
    after = total - warmup
    if decay == "linear":
        main = sched.LinearLR(opt, start_factor=1.0, end_factor=end_factor, total_iters=after)
    elif decay == "cosine":
        main = sched.CosineAnnealingLR(opt, T_max=after, eta_min=min_lr)
    elif decay == "step":
        main = sched.StepLR(opt, step_size=step_size, gamma=gamma)
    else:
        main = sched.LambdaLR(opt, lambda k: 1.0)
    if warmup == 0:
        return main
    if start > 0:
        warm = sched.LinearLR(opt, start_factor=start, end_factor=1.0, total_iters=warmup)
    else:
        warm = sched.LambdaLR(opt, lambda k: k / warmup)
    return sched.SequentialLR(opt, [warm, main], milestones=[warmup])


CASES = [
    dict(decay="cosine", warmup=100, start=0.1, total=800, min_lr=1e-4),  # runs past total
    dict(decay="cosine", warmup=0, start=0.0, total=1000, min_lr=0.0),
    dict(decay="cosine", warmup=50, start=0.0, total=1000, min_lr=2e-3),
    dict(decay="linear", warmup=30, start=0.25, total=600, end_factor=0.1),
    dict(decay="linear", warmup=0, start=0.0, total=1000, end_factor=0.0),
    dict(decay="step", warmup=20, start=0.5, total=0, step_size=90, gamma=0.7),
    dict(decay="step", warmup=0, start=0.0, total=0, step_size=1, gamma=0.999),
    dict(decay="constant", warmup=200, start=0.0, total=0),
]


def ampx_schedule(case) -> ampx.LRSchedule:
    return ampx.LRSchedule(decay=case["decay"], warmup_steps=case["warmup"],
                           warmup_start_factor=case["start"], total_steps=case["total"],
                           end_factor=case.get("end_factor", 0.0),
                           min_lr=case.get("min_lr", 0.0), step_size=case.get("step_size", 1),
                           gamma=case.get("gamma", 0.1))


def torch_case(case, opt):
    keys = ("end_factor", "min_lr", "step_size", "gamma")
    return torch_schedulers(opt, case["decay"], case["warmup"], case["start"], case["total"],
                            **{k: case[k] for k in keys if k in case})


class LrScheduleTest(unittest.TestCase):
    def test_every_schedule_matches_torch_for_1000_steps(self):
        for case in CASES:
            with self.subTest(**case):
                schedule = ampx_schedule(case)
                tparam = torch.zeros(4, requires_grad=True)
                topt = torch.optim.SGD([tparam], lr=BASE)
                tsched = torch_case(case, topt)
                param = ampx.zeros((4,))
                param.grad = ampx.tensor(np.ones(4, np.float32))
                opt = ampx.SGD([param], lr=BASE)
                opt.set_lr_schedule(schedule)
                previous = np.float32(0)
                for k in range(STEPS):
                    want = topt.param_groups[0]["lr"]
                    got = schedule.value(BASE, k)
                    if not math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-18):
                        self.fail(f"step {k}: ampx {got!r}, torch {want!r}")
                    opt.step()
                    tparam.grad = torch.ones(4)
                    topt.step()
                    tsched.step()
                    now = param.numpy()[0]
                    # The device stepped with fp32(value), exactly.
                    if now != np.float32(previous - np.float32(got)):
                        self.fail(f"step {k}: the parameter moved by {previous - now!r}, "
                                  f"not the fp32 rate {np.float32(got)!r}")
                    previous = now
                self.assertEqual(opt.step_count, STEPS)
                # torch stepped the same parameter with its own rates.
                tvalue = float(tparam.detach()[0])
                self.assertLessEqual(abs(float(previous) - tvalue),
                                     1e-6 * max(1.0, abs(tvalue)))

    def test_skipped_steps_do_not_advance_the_schedule(self):
        case = dict(decay="cosine", warmup=5, start=0.2, total=40, min_lr=1e-3)
        schedule = ampx_schedule(case)
        ctx = ampx.Context()
        param = ampx.zeros((2,), context=ctx)
        grad = ampx.tensor(np.ones(2, np.float32), context=ctx)
        param.grad = grad
        opt = ampx.SGD([param], lr=BASE)
        opt.set_lr_schedule(schedule)
        scaler = ampx.Scaler(ctx, init_scale=1.0)
        tparam = torch.zeros(2, requires_grad=True)
        topt = torch.optim.SGD([tparam], lr=BASE)
        tsched = torch_case(case, topt)
        overflow_at = {3, 4, 17, 30}
        want, taken = np.float32(0), 0
        for i in range(60):
            overflow = i in overflow_at
            scale = scaler.get_scale()
            grad.copy_(np.full(2, np.inf if overflow else scale, np.float32))
            before = param.numpy()[0]
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
            after = param.numpy()[0]
            self.assertEqual(opt.last_step_taken(), not overflow)
            if overflow:
                self.assertEqual(after, before)
            else:
                want = np.float32(want - np.float32(schedule.value(BASE, taken)))
                taken += 1
            self.assertEqual(after, want, f"iteration {i}")

            # torch: after a skipped step (GradScaler found infs) neither the
            # optimizer nor the scheduler steps.
            if not overflow:
                tparam.grad = torch.ones(2)
                topt.step()
                tsched.step()
        self.assertEqual(opt.step_count, 60 - len(overflow_at))
        self.assertLessEqual(abs(float(param.numpy()[0]) - float(tparam.detach()[0])), 1e-6)

    def test_state_dict_carries_the_count_and_the_schedules(self):
        params = [ampx.zeros((3,)), ampx.zeros((3,))]
        for p in params:
            p.grad = ampx.tensor(np.ones(3, np.float32))
        opt = ampx.AdamW([{"params": [params[0]], "lr": 0.01},
                          {"params": [params[1]], "lr": 0.02}])
        opt.set_lr_schedule(ampx.LRSchedule("linear", warmup_steps=3, total_steps=20), group=0)
        opt.set_lr_schedule(ampx.LRSchedule("step", step_size=4, gamma=0.5), group=1)
        for _ in range(6):
            opt.step()
        state = opt.state_dict()
        fresh = ampx.AdamW([{"params": [ampx.zeros((3,))], "lr": 0.01},
                            {"params": [ampx.zeros((3,))], "lr": 0.02}])
        fresh.load_state_dict(state)
        self.assertEqual(fresh.step_count, 6)
        self.assertEqual(fresh.get_lr_schedule(0), opt.get_lr_schedule(0))
        self.assertEqual(fresh.get_lr_schedule(1).gamma, 0.5)

    def test_bad_schedules_are_refused_and_change_nothing(self):
        param = ampx.zeros((2,))
        opt = ampx.SGD([param], lr=0.1)
        good = ampx.LRSchedule("cosine", warmup_steps=2, total_steps=10)
        opt.set_lr_schedule(good)
        bad = [ampx.LRSchedule("cosine", warmup_steps=-1, total_steps=10),
               ampx.LRSchedule("cosine", total_steps=0),
               ampx.LRSchedule("linear", warmup_steps=5, total_steps=5),
               ampx.LRSchedule("step", step_size=0),
               ampx.LRSchedule("step", gamma=1.5),
               ampx.LRSchedule("linear", total_steps=10, end_factor=2.0),
               ampx.LRSchedule("constant", warmup_steps=3, warmup_start_factor=-0.5)]
        for schedule in bad:
            with self.subTest(schedule=schedule):
                with self.assertRaises(ampx.InvalidArgumentError):
                    opt.set_lr_schedule(schedule)
                with self.assertRaises(ampx.InvalidArgumentError):
                    schedule.value(0.1, 0)
                self.assertEqual(opt.get_lr_schedule(), good)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.LRSchedule("exponential")
        with self.assertRaises(ampx.InvalidArgumentError):
            opt.set_lr_schedule(good, group=3)
        with self.assertRaises(ampx.ArgumentTypeError):
            opt.set_lr_schedule({"decay": "cosine"})
        with self.assertRaises(ampx.InvalidArgumentError):
            good.value(0.1, -1)
        self.assertEqual(opt.step_count, 0)


if __name__ == "__main__":
    unittest.main()
