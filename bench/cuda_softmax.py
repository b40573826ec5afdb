"""Row softmax fp32 on the GPU: tilecraft's one-kernel schedule beside ``torch.softmax``, as GB/s
(one read and one write of the matrix) and as a share of the device-to-device copy bandwidth
measured in the same run.

    python bench/cuda_softmax.py                       # 32768x1024 and 8192x4096
    python bench/cuda_softmax.py --shapes 4096x2048 --threads 256,512

The schedule (tilecraft/topi/cuda_schedules.py: softmax): a block per row, the row fetched
once into shared memory with 16-byte loads, max and sum of exponentials as cross-thread
reductions over threadIdx.x (warp shuffles + shared memory), 16-byte stores.
"""
from __future__ import annotations

import argparse

from cuda_common import build_breakdown, device_line, fmt_build, rel_err, tc_time, torch_time


def copy_bandwidth(repeat) -> float:
    import torch
    n = 1 << 28                                       # 1 GiB of float32
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    t = torch_time(lambda: dst.copy_(src), repeat=repeat, number=5)
    del src, dst
    return 2 * 4 * n / t / 1e9


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="32768x1024,8192x4096")
    p.add_argument("--threads", default="128,256,512")
    p.add_argument("--repeat", type=int, default=9)
    a = p.parse_args(argv)
    import torch
    from tilecraft.topi import cuda_schedules as cs
    copy = copy_bandwidth(a.repeat)
    print(f"softmax fp32 on {device_line()}; device-to-device copy {copy:.0f} GB/s (read + write)")
    for shape in a.shapes.split(","):
        rows, cols = (int(x) for x in shape.split("x"))
        nbytes = 2 * 4 * rows * cols
        X = torch.randn(rows, cols, device="cuda")
        Y = torch.full_like(X, float("nan"))
        ref = torch.softmax(X.double(), dim=1)
        t_ref = torch_time(lambda: torch.softmax(X, dim=1), repeat=a.repeat)
        print(f"{rows}x{cols}: torch.softmax {nbytes / t_ref / 1e9:.0f} GB/s = {nbytes / t_ref / 1e9 / copy:.1%} of copy")
        best = None
        for th in (int(x) for x in a.threads.split(",")):
            if cols % (th * 4):
                continue
            build, mod = build_breakdown(lambda: cs.softmax(rows, cols, threads=th), runs=1)
            Y.fill_(float("nan"))
            mod(X, Y)
            err = rel_err(Y, ref)
            t = tc_time(mod, (X, Y), repeat=a.repeat)
            gbs = nbytes / t / 1e9
            print(f"  tilecraft threads={th:4d}: {gbs:6.0f} GB/s = {gbs / copy:6.1%} of copy, "
                  f"{t_ref / t:6.1%} of torch speed, rel.err {err:.1e}, build {fmt_build(build)}")
            if best is None or gbs > best[1]:
                best = (th, gbs, build)
        print(f"RESULT softmax {rows}x{cols}: tilecraft best threads={best[0]} {best[1]:.0f} GB/s = "
              f"{best[1] / copy:.1%} of copy bandwidth {copy:.0f} GB/s (target >= 80%); torch "
              f"{nbytes / t_ref / 1e9:.0f} GB/s; build {fmt_build(best[2])}")
        del X, Y, ref


if __name__ == "__main__":
    main()
