"""`dgir schedule`: the warp-role timeline of a kernel, as a hand-written SVG (or text).

One lane per warpgroup region (its ids, roles and register budget).  Each lane shows the ops of its
tile loop in bands: the ops before the k-loop (prologue), the k-loop itself, and the ops after it
(tail / epilogue).  Inside a k-loop whose ops carry schedule attributes (`stage`, `order`,
`latency`, written by schedule_mma), ops are grouped by stage and sorted by order, and box width
grows with latency; elsewhere ops appear in program order.  Boxes are coloured by kind: TMA,
wait/barrier, wgmma, promotion (FFMA side), store.  Scalar index arithmetic is left out.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

from .ir import SCALAR_OPS, Node, Op

KINDS = {
    "tma": ("TMA load", "#4e79a7", {Op.TMA_LOAD, Op.PREFETCH_TMAP, Op.STAGE_SCALE}),
    "wait": ("wait / barrier", "#9c9c9c", {Op.ACQUIRE, Op.COMMIT, Op.WAIT, Op.RELEASE, Op.WGMMA_WAIT,
                                          Op.SYNC, Op.TMA_STORE_WAIT, Op.DRAIN}),
    "wgmma": ("wgmma", "#59a14f", {Op.WGMMA, Op.MMA_SCALED}),
    "promote": ("promote / scales", "#f28e2b", {Op.PROMOTE, Op.SMEM_READ, Op.LOAD_ROW_SCALES, Op.LOAD_SCALE, Op.SMEM_SCALAR, Op.SCALE,
                                                Op.ZERO}),
    "store": ("store", "#e15759", {Op.STAGE_OUT, Op.TMA_STORE}),
}
OTHER = ("other", "#b07aa1")


def kind_of(n: Node) -> str:
    for k, (_, _, ops) in KINDS.items():
        if n.op in ops:
            return k
    return "other"


def _shown(n: Node) -> bool:
    return n.op not in SCALAR_OPS or n.op in (Op.LOAD_SCALE, Op.SMEM_SCALAR)


@dataclass
class Band:
    title: str
    ops: list = field(default_factory=list)        # (group label or None, Node)


@dataclass
class Lane:
    title: str
    bands: list


def _band_ops(title: str, nodes) -> Band:
    """Group by `stage` and sort by `order` when every shown op has them; else program order."""
    shown = [n for n in nodes if _shown(n)]
    if shown and all(n.get("stage") is not None and n.get("order") is not None for n in shown):
        shown.sort(key=lambda n: (n.get("stage"), n.get("order")))
        return Band(title, [(f"stage {n.get('stage')}", n) for n in shown])
    return Band(title, [(None, n) for n in shown])


def lanes(kernel: Node) -> list[Lane]:
    out = []
    for wg in (n for n in kernel.body if n.op is Op.WARPGROUP):
        ids = ",".join(str(i) for i in wg.get("ids", ()))
        title = f"warpgroup {ids}\n{'+'.join(wg.get('roles', ()))}"
        if wg.get("regs") is not None:
            title += f" · {wg.get('regs')} regs"
        loops = [i for i, n in enumerate(wg.body) if n.op is Op.FOR]
        tile_loop = wg.body[loops[0]] if loops else wg
        body = list(tile_loop.body)
        kloops = [i for i, n in enumerate(body) if n.op is Op.FOR]
        bands = []
        if loops and any(_shown(n) for n in wg.body[:loops[0]]):
            bands.append(_band_ops("setup", wg.body[:loops[0]]))
        if not kloops:
            bands.append(_band_ops("body", body))
        else:
            first, last = kloops[0], kloops[-1]
            if any(_shown(n) for n in body[:first]):
                bands.append(_band_ops("prologue", body[:first]))
            for j, i in enumerate(kloops):
                loop = body[i]
                label = f"k-loop %{loop.name}" + (f" ({loop.get('interleave')})" if loop.get("interleave") else "")
                bands.append(_band_ops(label, loop.body))
                if j + 1 < len(kloops) and any(_shown(n) for n in body[i + 1:kloops[j + 1]]):
                    bands.append(_band_ops("between", body[i + 1:kloops[j + 1]]))
            if any(_shown(n) for n in body[last + 1:]):
                bands.append(_band_ops("tail / epilogue", body[last + 1:]))
        if loops and any(_shown(n) for n in wg.body[loops[0] + 1:]):
            bands.append(_band_ops("exit", wg.body[loops[0] + 1:]))
        out.append(Lane(title, [b for b in bands if b.ops]))
    return out


def _label(n: Node) -> str:
    s = n.op.value
    if n.op is Op.WGMMA:
        s += f" n{n.get('n')}" + (" d=0" if n.get("scale_d") == 0 else "")
    elif n.op is Op.WGMMA_WAIT:
        s += f" {n.get('pending')}"
    elif n.op is Op.TMA_LOAD and len(n.args) > 2:
        s += f" {n.args[2]}"
    elif n.op in (Op.PREFETCH_TMAP,) and n.args:
        s += f" {n.args[0]}"
    return s


def _width(n: Node) -> float:
    lat = n.get("latency")
    w = 7.0 * len(_label(n)) + 12
    if isinstance(lat, (int, float)) and lat > 0:
        w = max(w, 40 + 22 * math.log2(1 + lat))
    return w


def render_svg(kernel: Node, title: str | None = None) -> str:
    """The timeline as a standalone SVG document (one lane per warpgroup region)."""
    ls = lanes(kernel)
    left, top, lane_h, box_h, gap = 190, 56, 96, 34, 6
    esc = html.escape
    parts = []
    width = left
    for li, lane in enumerate(ls):
        y0 = top + li * lane_h
        parts.append(f'<rect x="0" y="{y0}" width="{{W}}" height="{lane_h - 4}" fill="{"#f7f7f7" if li % 2 else "#ffffff"}"/>')
        for i, line in enumerate(lane.title.split("\n")):
            parts.append(f'<text x="8" y="{y0 + lane_h / 2 - 4 + 15 * i}" font-size="12" font-weight="bold">'
                         f'{esc(line)}</text>')
        x = left
        for band in lane.bands:
            bx = x
            groups = []
            for group, n in band.ops:
                if not groups or groups[-1][0] != group:
                    if groups:
                        x += 8
                    groups.append([group, x])
                w = _width(n)
                k = kind_of(n)
                color = KINDS[k][1] if k in KINDS else OTHER[1]
                by = y0 + 34
                tip = esc(repr(n.with_body(()) if n.body else n).strip())
                parts.append(f'<g><title>{tip}</title><rect x="{x:.1f}" y="{by}" width="{w:.1f}" height="{box_h}" '
                             f'rx="4" fill="{color}" stroke="#333" stroke-width="0.5" class="op {k}" '
                             f'data-op="{n.op.value}"/>')
                parts.append(f'<text x="{x + 5:.1f}" y="{by + 14}" font-size="11" fill="#fff">{esc(_label(n))}</text>')
                lat = n.get("latency")
                if lat is not None:
                    parts.append(f'<text x="{x + 5:.1f}" y="{by + 28}" font-size="9" fill="#fff">{esc(str(lat))} cyc</text>')
                parts.append("</g>")
                groups[-1].append(x + w)
                x += w + gap
            for group, gx0, *ends in groups:
                if group is not None and ends:
                    parts.append(f'<text x="{gx0:.1f}" y="{y0 + 29}" font-size="10" fill="#555">{esc(group)}</text>')
            parts.append(f'<rect x="{bx - 4:.1f}" y="{y0 + 4}" width="{x - bx + 2:.1f}" height="{lane_h - 14}" '
                         f'fill="none" stroke="#888" stroke-dasharray="4 3" class="band"/>')
            parts.append(f'<text x="{bx:.1f}" y="{y0 + 14}" font-size="10" fill="#333" font-style="italic">'
                         f'{esc(band.title)}</text>')
            x += 18
        width = max(width, x)
    width = int(width + 20)
    ly = top + len(ls) * lane_h + 14
    legend = []
    lx = 10
    for label, color, _ in list(KINDS.values()) + [(*OTHER, None)]:
        legend.append(f'<rect x="{lx}" y="{ly}" width="14" height="14" fill="{color}"/>'
                      f'<text x="{lx + 18}" y="{ly + 11}" font-size="11">{esc(label)}</text>')
        lx += 30 + 7 * len(label)
    width = max(width, lx)
    height = ly + 30
    head = esc(title or f"%{kernel.name}")
    body = "\n".join(p.replace("{W}", str(width)) for p in parts)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="monospace">\n'
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>\n'
            f'<text x="10" y="22" font-size="14" font-weight="bold">{head}</text>\n'
            f'<text x="10" y="40" font-size="11" fill="#555">warp-role timeline: one lane per warpgroup region; '
            f'boxes in stage/order when scheduled, program order otherwise; width grows with latency</text>\n'
            f'{body}\n' + "\n".join(legend) + "\n</svg>\n")


def render_text(kernel: Node) -> str:
    """The same timeline as plain text (for terminals)."""
    out = []
    for lane in lanes(kernel):
        out.append(lane.title.replace("\n", " · "))
        for band in lane.bands:
            out.append(f"  [{band.title}]")
            for group, n in band.ops:
                lat = n.get("latency")
                out.append(f"    {(group or ''):8} {kind_of(n):8} {_label(n)}" + (f"  ({lat} cyc)" if lat is not None else ""))
    return "\n".join(out) + "\n"
