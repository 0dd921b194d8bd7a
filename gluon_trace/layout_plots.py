"""Layouts as matplotlib figures (``layout.plot(...)``): who owns each element of a
distributed layout, which bank each element of a shared layout lands in, and how many
wavefronts each element of a register<->shared access costs.

matplotlib is imported only when a figure is asked for (the ``[tune]``/``[dev]`` extras);
each function draws on ``ax`` when given one, else on a new figure, and returns the axes.
"""
from __future__ import annotations

import numpy as np


def _axes(ax, shape):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt
    rows, cols = shape
    _, ax = plt.subplots(figsize=(min(1.0 + cols * 0.45, 18), min(1.0 + rows * 0.35, 18)))
    return ax


def _grid(values: np.ndarray) -> np.ndarray:
    """2-D view: 1-D tiles wrap 16 per row; leading dims of >2-D tiles stack rows."""
    if values.ndim == 1:
        n = values.shape[0]
        cols = min(n, 16)
        return values.reshape(-1, cols)
    return values.reshape(-1, values.shape[-1])


def plot_owners(linear, title: str = "", ax=None, annotate: bool = True):
    """Each cell coloured by its owning lane (warps darker), labelled ``T<lane>:R<reg>``."""
    coords = linear.coords()                   # [warps, lanes, regs, ndim]
    w, l, r, nd = coords.shape
    shape = linear.shape
    lane = np.full(shape, -1, np.int64)
    warp = np.zeros(shape, np.int64)
    reg = np.zeros(shape, np.int64)
    idx = tuple(coords.reshape(-1, nd).T)
    ww, ll, rr = np.meshgrid(np.arange(w), np.arange(l), np.arange(r), indexing="ij")
    order = slice(None, None, -1)              # the lowest owner is written last and wins
    lane[tuple(i[order] for i in idx)] = ll.reshape(-1)[order]
    warp[tuple(i[order] for i in idx)] = ww.reshape(-1)[order]
    reg[tuple(i[order] for i in idx)] = rr.reshape(-1)[order]
    g_lane, g_warp, g_reg = _grid(lane), _grid(warp), _grid(reg)
    ax = _axes(ax, g_lane.shape)
    shade = (g_lane % max(l, 1)) / max(l, 1) * 0.8 + (g_warp / max(w, 1)) * 0.2
    ax.imshow(shade, cmap="hsv", vmin=0, vmax=1, alpha=0.55, aspect="auto")
    if annotate and g_lane.size <= 1024:
        for (i, j), ln in np.ndenumerate(g_lane):
            txt = (f"W{g_warp[i, j]}" if w > 1 else "") + f"T{ln}:R{g_reg[i, j]}"
            ax.text(j, i, txt, ha="center", va="center", fontsize=6)
    ax.set_title(title or f"{shape}: {r} regs x {l} lanes x {w} warps")
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    return ax


def plot_banks(banks: np.ndarray, title: str = "", ax=None, annotate: bool = True):
    """Each cell coloured and labelled by the 4-byte bank (0..31) its first byte lands in."""
    g = _grid(np.asarray(banks))
    ax = _axes(ax, g.shape)
    ax.imshow(g, cmap="twilight", vmin=0, vmax=32, aspect="auto")
    if annotate and g.size <= 2048:
        for (i, j), b in np.ndenumerate(g):
            ax.text(j, i, str(int(b)), ha="center", va="center", fontsize=6)
    ax.set_title(title or "shared-memory bank of each element")
    return ax


def plot_heat(costs: np.ndarray, title: str = "", ax=None):
    """Per-element access cost (e.g. how many words its bank had to serve): a conflict heat map."""
    g = _grid(np.asarray(costs))
    ax = _axes(ax, g.shape)
    im = ax.imshow(g, cmap="inferno", aspect="auto")
    ax.figure.colorbar(im, ax=ax, shrink=0.8)
    ax.set_title(title or "bank-conflict cost per element")
    return ax
