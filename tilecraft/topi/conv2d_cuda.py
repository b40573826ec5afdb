"""2-D convolution, NCHW data and OIHW kernel: a tuning template for CUDA.

    import tilecraft.topi
    task = autotune.task.create("topi/conv2d_nchw.cuda",
                                args=(1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"), target="cuda")

The arguments are those of ``topi/conv2d_nchw.llvm``: ``N, CI, H, W, CO, KH, KW, stride,
padding, dtype``.

The schedule is ``tilecraft.topi.cuda_schedules.conv2d_nchw`` (direct convolution: a block
computes ``tile_co`` output channels of a ``tile_y × tile_x`` patch, each thread ``x_per_thread``
neighbouring pixels for ``co_per_thread`` channels; on outputs of at most 8×8 pixels,
``k_split`` parts of the input channels go to separate blocks and a second kernel sums them; per ``ci_tile`` input channels all threads fetch the padded input patch
with its halo and the transposed weights into shared memory). On batches of several images,
``n_per_block`` images share a block (each weight fetched serves them all; the register tile
holds the thread's pixels × channels for each image). Its sizes are the knobs; the filter
keeps configurations that divide the output, keep at most 32 accumulators per thread, fit
``SHARED_LIMIT`` bytes of shared memory (above 48 KB the kernel takes dynamic shared memory; the
limit leaves room for two blocks per H100/H200 multiprocessor) and launch 32 to 1024 threads
per block.
"""
from __future__ import annotations

import tilecraft.autotune as autotune


SHARED_LIMIT = 100 * 1024


def _divisors(n: int, at_most: int) -> list:
    return [d for d in range(1, min(n, at_most) + 1) if n % d == 0]


def conv_tiles_ok(CI, OH, OW, CO, KH, KW, tile_co, tile_y, tile_x, cpt, ci_tile, xpt=1, stride=1,
                  k_split=1, n_per_block=1, N=1) -> bool:
    """Whether a configuration of the CUDA conv2d schedule is well-formed."""
    if CO % tile_co or tile_co % cpt or OH % tile_y or OW % tile_x or tile_x % xpt or N % n_per_block:
        return False
    if CI % (ci_tile * k_split):
        return False
    if cpt * xpt * n_per_block > 32:         # accumulators per thread
        return False
    tz = tile_co // cpt
    threads = tile_x // xpt * tile_y * tz
    if not 32 <= threads <= 1024 or tz > 64:
        return False
    patch = ((tile_y - 1) * stride + KH) * ((tile_x - 1) * stride + KW)
    shared = ci_tile * (n_per_block * patch + KH * KW * tile_co) * 4
    return shared <= SHARED_LIMIT


def fallback_tiles(CI, OH, OW, CO, KH, KW, stride) -> dict:
    """The hand schedule's tiles (16 channels × 8 × 8 pixels, 4 channels per thread) where they
    fit the layer, else the nearest that do (divisors of the output, smaller channel tiles)."""
    def best_div(n, want):
        return max(d for d in range(1, min(n, want) + 1) if n % d == 0)
    tile_y, tile_x = best_div(OH, 8), best_div(OW, 8)
    for tile_co, cpt in ((16, 4), (8, 4), (8, 2), (4, 1), (2, 1), (1, 1)):
        for ci_tile in (16, 8, 4, 2, 1):
            if conv_tiles_ok(CI, OH, OW, CO, KH, KW, tile_co, tile_y, tile_x, cpt, ci_tile, 1, stride) or (
                    tile_co == 1 and ci_tile == 1):
                return dict(tile_co=tile_co, tile_y=tile_y, tile_x=tile_x, co_per_thread=cpt, ci_tile=ci_tile)


@autotune.template("topi/conv2d_nchw.cuda")
def conv2d_nchw_cuda(N: int, CI: int, H: int, W: int, CO: int, KH: int, KW: int, stride: int, padding: int,
                     dtype: str = "float32"):
    """conv2d NCHW on the GPU: direct, shared input patch and weights, a register tile of pixels x channels."""
    from tilecraft.topi import cuda_schedules

    cfg = autotune.get_config()
    OH, OW = (H + 2 * padding - KH) // stride + 1, (W + 2 * padding - KW) // stride + 1
    cfg.define_knob("tile_co", [2, 4, 8, 16, 32, 64])   # few channels per block: more blocks for small images
    cfg.define_knob("co_per_thread", [1, 2, 4, 8])
    cfg.define_knob("tile_y", _divisors(OH, 16))
    cfg.define_knob("tile_x", _divisors(OW, 32))
    cfg.define_knob("ci_tile", [c for c in (4, 8, 16, 32) if CI % c == 0] or [1])
    cfg.define_knob("x_per_thread", [1, 2, 4])
    # split the input channels over blocks when the image is small (few blocks otherwise)
    small = OH * OW <= 64
    if small:
        cfg.define_knob("k_split", [1, 2, 4, 8])
    # several images per block on batches (weights fetched once for all of them)
    batched = N > 1
    if batched:
        cfg.define_knob("n_per_block", _divisors(N, 8))

    def k_split(e):
        return e["k_split"].val if small else 1

    def n_per_block(e):
        return e["n_per_block"].val if batched else 1

    def ok(e):
        return conv_tiles_ok(CI, OH, OW, CO, KH, KW, e["tile_co"].val, e["tile_y"].val, e["tile_x"].val,
                             e["co_per_thread"].val, e["ci_tile"].val, e["x_per_thread"].val, stride,
                             k_split(e), n_per_block(e), N)

    cfg.multi_filter(ok)
    cfg.add_flop(2.0 * N * CO * OH * OW * CI * KH * KW)
    if cfg.is_fallback:
        return cuda_schedules.conv2d_nchw(N, CI, H, W, CO, KH, KW, padding, dtype, **fallback_tiles(
            CI, OH, OW, CO, KH, KW, stride), stride=stride)
    if not ok(cfg):
        cfg.raise_error("tile sizes do not divide the output or do not fit a thread block")
        return cuda_schedules.conv2d_nchw(N, CI, H, W, CO, KH, KW, padding, dtype, stride=stride)
    return cuda_schedules.conv2d_nchw(N, CI, H, W, CO, KH, KW, padding, dtype, stride=stride,
                                      tile_co=cfg["tile_co"].val, tile_y=cfg["tile_y"].val,
                                      tile_x=cfg["tile_x"].val, co_per_thread=cfg["co_per_thread"].val,
                                      ci_tile=cfg["ci_tile"].val, x_per_thread=cfg["x_per_thread"].val,
                                      k_split=k_split(cfg), n_per_block=n_per_block(cfg))
