"""Measured tile configs: a table shipped with dgir plus a user cache on disk, consulted before the model.

An entry says: on this device (name, SM count), for this operator and exact shape, this config was
the fastest of the configs timed.  Entries come from two places:

* ``dgir/tuned/*.json``, shipped: built by ``python bench/make_tuned_table.py`` from the committed
  measurements in ``bench/results`` (every config timed there, best per shape);
* ``<DG_JIT_CACHE_DIR>/tuned.json``, the user's: written by :func:`dgir.autotune.autotune` when
  ``DG_AUTOTUNE=1`` (a shape without an entry is timed on first use and recorded).

``DGIR_TUNED=0`` ignores both (the cost model alone picks).  The user's entries win over shipped
ones.  A device's entries are its own (the shipped files hold the H200's and the H100 SXM's); another
part of the same chip with the same SM count takes the H200's wherever it has none of its own
(:func:`stand_in_device`), and the nearby rules weigh one device's entries at a time, its own first
(bench/TUNING.md step 124).  A shape without an entry of its own takes a measured config of a nearby M for the same
device, operator, N and K: at most SMALL_M (memory-bound: split-K and cluster choices the model
gets wrong), the entry of the nearest M if it is also small (:func:`nearest`); above, the fastest of
the entries just below and just above (:func:`bracketing`, within GRID_RATIO; above WIDE_NEARBY_M
every entry within GRID_RATIO, :func:`within_grid_ratio`, step 87), each entry's time
scaled by its load at this M against its own (`sm_load`: how many rounds its tiles take, or with two
CTAs per SM how many CTAs an SM holds; bench/TUNING.md
step 46): the rounds are what changes between nearby M (M = 200 needs two 192-row blocks where
M = 192 needs one).  An entry whose rounds grow at M, and that the cost model rates slower than its
own pick there, is set aside (:func:`outgrown_entry`, step 104).  A small M whose (N, K) has no
entries at all may take the config of the nearest measured (N', K') instead (:func:`analogous`,
step 82).  Else the cost model.  A launch limited to fewer of the device's SMs
(deep_gemm.set_num_sms) looks up its own SM count first, then takes the whole device's entry where
that runs the same way on fewer SMs (:func:`dgir.ops.fp8_gemm.on_fewer_sms`), and never a config of
two CTAs per SM (step 115).  A config is
a dict of the operator's config fields; it is validated before use, so a stale or hand-edited entry
is skipped rather than trusted.

:func:`choose` walks that order and says which step answered (:class:`Choice`).  The API
(dgir.deep_gemm) asks it for the device it runs on; ``dgir.compile`` and ``dgir compile``, which need
no GPU, ask it for the target's reference device (:data:`TARGET_DEVICE`), so a dump shows the kernel
that the API runs for the same shape on that device.
"""
from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .env import env

SHIPPED = Path(__file__).resolve().parent / "tuned"


def _entries(path: Path) -> list[dict]:
    try:
        st = path.stat()
    except OSError:
        return []
    return _parsed(str(path), st.st_ino, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _parsed(path: str, inode: int, mtime_ns: int, size: int) -> tuple:
    """A table file's entries, parsed once per version of the file: `record` replaces the user cache
    by a new file (a new inode), so the next look-up parses it again."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    return tuple(e for e in doc.get("entries", []) if isinstance(e, dict))


def user_cache() -> Path:
    return env().cache_dir / "tuned.json"


def _key(e: dict) -> tuple:
    return e.get("device"), e.get("sms"), e.get("op"), e.get("m"), e.get("n"), e.get("k")


@functools.lru_cache(maxsize=4)
def _shipped_files(folder: str) -> tuple[Path, ...]:
    """The shipped table files (they do not change while the package is imported)."""
    return tuple(sorted(Path(folder).glob("*.json")))


def _table_versions() -> tuple:
    """(path, inode, mtime, size) of the user cache and every shipped table: the identity of what a
    look-up reads.  `record` replaces the user cache by a new file, so a new entry is a new version."""
    out = []
    for path in (user_cache(),) + _shipped_files(str(SHIPPED)):
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((str(path), st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _own_in(versions: tuple, op: str, device: str, sms: int) -> tuple:
    """The entries of these file versions measured on `device` itself with a config for (sms, op),
    user cache first."""
    return tuple(e for version in versions for e in _parsed(*version)
                 if _key(e)[:3] == (device, sms, op) and isinstance(e.get("config"), dict))


def _own_entries(op: str, device: str, sms: int) -> tuple:
    """The entries measured on `device` itself with a config for (sms, op), user cache first."""
    return _own_in(_table_versions(), op, device, sms)


# Hopper parts built on the H200's chip (GH100, sm_90a).  One of them with the reference device's SM
# count and no entry of its own for a shape takes the reference device's (stand_in_device): the H100
# SXM runs the same 132 SMs with less memory bandwidth (3.35 against 4.8 TB/s), and on it the configs
# measured on the H200 took 0.929x and 0.947x the time of the cost model's picks on two held-out
# draws where they differ (specs 308-309, bench/TUNING.md step 124).
SAME_CHIP_PREFIXES = ("NVIDIA H100", "NVIDIA H800", "NVIDIA H200", "NVIDIA GH200")


def stand_in_device(device: str, sms: int, target: str = "sm90a") -> str | None:
    """The device whose entries fill in for `device`'s missing ones, or None: the target's reference
    device (TARGET_DEVICE) where `device` is another part of the same chip with the same SM count."""
    ref, ref_sms = TARGET_DEVICE[target]
    if device == ref or sms != ref_sms or not device.startswith(SAME_CHIP_PREFIXES):
        return None
    return ref


@functools.lru_cache(maxsize=64)
def _measured_in(versions: tuple, op: str, device: str, sms: int) -> tuple[tuple, dict]:
    """(every entry with a config for (device, sms, op), user cache first, then the stand-in device's
    at the shapes this device has none for; the same entries by (n, k)), built once per version of the
    files: a new M's choice reads them many times (linear scans of every file made a cold choice
    ~0.65 ms)."""
    own = _own_in(versions, op, device, sms)
    ref = stand_in_device(device, sms)
    merged = own
    if ref is not None:
        have = {(e.get("m"), e.get("n"), e.get("k")) for e in own}
        merged = own + tuple(e for e in _own_in(versions, op, ref, sms)
                             if (e.get("m"), e.get("n"), e.get("k")) not in have)
    by_nk: dict = {}
    for e in merged:
        by_nk.setdefault((e.get("n"), e.get("k")), []).append(e)
    return merged, {nk: tuple(es) for nk, es in by_nk.items()}


def _measured_any(op: str, device: str, sms: int) -> tuple:
    """Every entry with a config for (device, sms, op), user cache first; then the stand-in device's
    entries (stand_in_device) at the shapes this device has none for.  An entry keeps its own
    `device`, so a choice says where it was measured."""
    return _measured_in(_table_versions(), op, device, sms)[0]


def _measured(op: str, device: str, sms: int, n: int, k: int) -> tuple:
    """Every entry with a config for (device, sms, op, n, k), user cache first."""
    return _measured_in(_table_versions(), op, device, sms)[1].get((n, k), ())


def _grids(op: str, device: str, sms: int, n: int, k: int) -> list[list[dict]]:
    """The entries for (device, sms, op, n, k) that name a positive M, user cache first, as one list
    per device that measured them: the device's own, then the stand-in's (empty lists left out).  The
    nearby rules weigh measured times against each other, so they weigh one device's at a time."""
    grid = [e for e in _measured(op, device, sms, n, k) if isinstance(e.get("m"), int) and e["m"] >= 1]
    own = [e for e in grid if e.get("device") == device]
    return [g for g in (own, [e for e in grid if e.get("device") != device]) if g]


def _grid(op: str, device: str, sms: int, n: int, k: int) -> list[dict]:
    """The first of `_grids`: the device's own entries for (n, k) where it has any."""
    grids = _grids(op, device, sms, n, k)
    return grids[0] if grids else []


def lookup(op: str, device: str, sms: int, m: int, n: int, k: int) -> dict | None:
    """The recorded entry for this exact shape on this device, user cache first; None if none."""
    return next((e for e in _measured(op, device, sms, n, k) if e.get("m") == m), None)


SMALL_M = 128             # 1, 17, 96 -> the entry at 64 or 128 (nearest)
NEAREST_RATIO = 1.25      # nearest() also accepts an entry this close when only one side is small


def nearest(op: str, device: str, sms: int, m: int, n: int, k: int, grid: list | None = None) -> dict | None:
    """The entry for (device, sms, op, n, k) whose M is nearest to `m` on a log scale (ties: the
    larger M; user cache first), if it is close (see the module doc); else None.  grid: the entries
    to look in (default `_grid`)."""
    grid = _grid(op, device, sms, n, k) if grid is None else grid
    if not grid:
        return None
    # min keeps the first of equal keys: the user cache's entry at an M the table also has
    best = min(grid, key=lambda e: (abs(math.log(e["m"] / max(m, 1))), -e["m"]))
    close = abs(math.log(best["m"] / max(m, 1))) <= math.log(NEAREST_RATIO) or max(m, best["m"]) <= SMALL_M
    return best if close else None


GRID_RATIO = 1.5          # the shipped grid's widest step (2^i -> 3 * 2^i -> 2^(i+2))


def bracketing(op: str, device: str, sms: int, m: int, n: int, k: int, grid: list | None = None) -> list[dict]:
    """The entries for (device, sms, op, n, k) at the nearest measured M below `m` and the nearest
    above (user cache first among equal M), each within a factor GRID_RATIO of `m`."""
    grid = _grid(op, device, sms, n, k) if grid is None else grid
    below = [e for e in grid if m / GRID_RATIO <= e["m"] <= m]
    above = [e for e in grid if m < e["m"] <= m * GRID_RATIO]
    out = []
    if below:
        out.append(max(below, key=lambda e: e["m"]))      # max / min keep the first of equal M
    if above:
        out.append(min(above, key=lambda e: e["m"]))
    return out


WIDE_NEARBY_M = 512       # above it, nearby_config also weighs the entries beyond the bracketing two


def within_grid_ratio(op: str, device: str, sms: int, m: int, n: int, k: int, grid: list | None = None) -> list[dict]:
    """Every entry for (device, sms, op, n, k) whose M is within a factor GRID_RATIO of `m`, one per
    M (the user cache's first).  Step 87: M = 4097 sits just past the 4096 entry, whose 256-row tiles
    leave a 17th block one row deep; the 3072 entry's 192-row tiles (the table of then), scaled by
    their rounds, were the better estimate there (4097x32768x512: 144.8 us against 152.5)."""
    out: dict[int, dict] = {}
    for e in _grid(op, device, sms, n, k) if grid is None else grid:
        if m / GRID_RATIO <= e["m"] <= m * GRID_RATIO:
            out.setdefault(e["m"], e)
    return list(out.values())


ANALOG_RATIO = 2.5        # analogous(): N and K each within this factor of the entry's
ANALOG_MAX_M = 512        # analogous() answers up to here: two bands, M <= SMALL_M and SMALL_M < M <= this


def analogous(op: str, device: str, sms: int, m: int, n: int, k: int) -> dict | None:
    """For M <= ANALOG_MAX_M: among the entries of other (N', K') in M's band (M <= SMALL_M, or
    SMALL_M < M <= ANALOG_MAX_M), the one at the band's M nearest to `m` (log scale; ties: the larger
    M) of the (N', K') nearest to (N, K), |log N/N'| + |log K/K'|, with N' and K' each within
    ANALOG_RATIO; None when there is none.  :func:`choose` carries its config over to (N, K) where the
    cost model's own pick is of a kind it is known to misjudge (bench/TUNING.md steps 82, 85)."""
    if m > ANALOG_MAX_M:
        return None
    lo, hi = (1, SMALL_M) if m <= SMALL_M else (SMALL_M + 1, ANALOG_MAX_M)
    band = [e for e in _measured_any(op, device, sms) if isinstance(e.get("m"), int) and lo <= e["m"] <= hi
            and isinstance(e.get("n"), int) and isinstance(e.get("k"), int) and (e["n"], e["k"]) != (n, k)]
    if not band:
        return None
    near_m = min({e["m"] for e in band}, key=lambda x: (abs(math.log(x / max(m, 1))), -x))
    best, best_d = None, None
    for e in band:        # user cache first: min keeps the first of equal distances
        dn, dk = abs(math.log(n / e["n"])), abs(math.log(k / e["k"]))
        if e["m"] != near_m or max(dn, dk) > math.log(ANALOG_RATIO):
            continue
        if best is None or dn + dk < best_d:
            best, best_d = e, dn + dk
    return best


def record(entry: dict, path: Path | None = None) -> Path:
    """Add (or replace) one entry in the user cache; the file is rewritten atomically."""
    path = path or user_cache()
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [e for e in _entries(path) if _key(e) != _key(entry)] + [entry]
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tuned.")
    with os.fdopen(fd, "w") as f:
        json.dump({"version": 1, "entries": entries}, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


# The device whose measurements steer a compile that has no GPU to ask (dgir.compile, the CLI).
TARGET_DEVICE = {"sm90a": ("NVIDIA H200", 132)}


@dataclass(frozen=True)
class Choice:
    """A tile config and the step of :func:`choose` that gave it.

    source: "measured" (an entry for this exact shape), "autotuned" (timed now, DG_AUTOTUNE=1),
    "nearby" (an entry at a nearby M, same N and K), "model" (the cost model), "analogous" (an entry
    of a similar (N', K') carried over), or "given" (the caller passed the config)."""
    config: object
    source: str
    detail: str = ""

    def describe(self) -> str:
        return self.source + (f" ({self.detail})" if self.detail else "")


def measured_on(entry: dict, device: str) -> str:
    """", measured on <device>" where the entry is the stand-in device's, else ""."""
    dev = entry.get("device")
    return f", measured on {dev}" if dev != device else ""


def valid_config(fields: dict):
    """The config an entry names, or None when it does not describe a legal config (stale entry)."""
    from .ops import OpError
    from .ops.fp8_gemm import Fp8GemmConfig, check_config
    try:
        cfg = Fp8GemmConfig(**fields)
        check_config(cfg)
    except (TypeError, OpError):
        return None
    return cfg


def _residency_note(cfg) -> str:
    """Where a split over a cluster is counted with fewer resident clusters than the SM slots hold
    (fp8_gemm_walk.RESIDENT_CLUSTERS_MEASURED), say so: the rounds above depend on it."""
    from .ops.fp8_gemm_walk import resident_clusters_estimate
    resident, slots = resident_clusters_estimate(cfg), cfg.num_sms * cfg.ctas_per_sm // cfg.split_k
    if resident is None or resident == slots:
        return ""
    return (f"; {resident} clusters of {cfg.split_k} resident at {cfg.ctas_per_sm} CTA{'s' * (cfg.ctas_per_sm > 1)} an SM, "
            f"not the {slots} the slots hold (the driver's count, fp8_gemm_walk.RESIDENT_CLUSTERS_MEASURED)")


def choose(op: str, m: int, n: int, k: int, device: str, sms: int, *, tuned: bool = True,
           autotune: Callable[[], object] | None = None, trace: list | None = None,
           device_sms: int | None = None) -> Choice:
    """The tile config for this shape on this device, in the order of the module doc: the entry for
    the exact shape; else `autotune()` when given (DG_AUTOTUNE=1: it times and records); else an
    entry at a nearby M; else the cost model, which at M <= ANALOG_MAX_M gives way to an analogous
    (N', K')'s config where its pick is of a kind it misjudges.  tuned=False (DGIR_TUNED=0): the
    model alone.  trace: a list that gets one line per step asked (`dgir choose` prints it).
    The config's m_tail is settled for this M (`fp8_gemm.settle_m_tail`): the kernel the call runs
    shifts a short last m block, and carries no code for it where there is none; so is its
    early_epilogue (`fp8_gemm.settle_early_epilogue`), and, for half a round to sixteen rounds
    at narrow N, its tile order (`fp8_gemm.settle_walk_order`: single CTAs walking N first).
    device_sms: the device's SM count where the launch may use only `sms` of them
    (deep_gemm.set_num_sms).  Then, after an entry for `sms` itself, the whole device's entry for the
    shape stands where it runs the same way on `sms` SMs (`fp8_gemm.on_fewer_sms`), and no config
    with two CTAs per SM is chosen (they could spread over twice as many SMs): the model's best
    with one CTA per SM stands in for any such pick."""
    limited = device_sms is not None and sms < device_sms
    c = _choose(op, m, n, k, device, sms, tuned=tuned, autotune=autotune, trace=trace,
                device_sms=device_sms if limited else None)
    if limited and getattr(c.config, "ctas_per_sm", 1) > 1:
        from .ops import get_operator
        picked = c.config
        c = Choice(get_operator(op).choose_config(m=m, n=n, k=k, num_sms=sms, one_cta_per_sm=True), "model",
                   f"{sms} SMs of {device}, one CTA per SM")
        if trace is not None:
            trace.append(f"one CTA per SM ({sms} SMs of the device): {c.config.kernel_name()} in place of "
                         f"{picked.kernel_name()}")
    if hasattr(c.config, "m_tail"):
        from .ops import fp8_gemm as F
        chosen = c.config
        c = Choice(F.settle(chosen, m), c.source, c.detail)
        if trace is not None:
            if c.config.swizzle_group != chosen.swizzle_group:
                trace.append(f"walk order: N first, single CTAs, in place of {chosen.kernel_name()} (at most "
                             f"{F.N_FIRST_MAX_ROUNDS} rounds over {chosen.n_blocks} n blocks: the CTAs of an A panel "
                             "run side by side; fp8_gemm.settle_walk_order)")
            cfg, bm = c.config, c.config.block_m
            walkers, tiles = F.walk_walkers(m, cfg)
            rows, band = F.walk_rows(m, cfg)
            rounds = F.walk_rounds(m, cfg)
            trace.append(f"walk: {walkers} {'clusters' if cfg.cluster > 1 or cfg.split_cluster else 'CTAs'} over "
                         f"{tiles} tiles ({rounds} round{'s' * (rounds != 1)}), {rows} rows of m blocks in bands of {band}"
                         + ("; each walker keeps one m block" if F.walkers_keep_their_m_block(m, cfg) else "")
                         + _residency_note(cfg))
            trace.append(f"m_tail: {cfg.m_tail} (the last m block holds {m - F.last_m0(m, bm)} of its {bm} rows)")
            if c.config.early_epilogue != "on":
                where = F.early_store_loses(m, c.config) or "in the entry's config"
                trace.append(f"early_epilogue: {c.config.early_epilogue} (no early store: it measured "
                             f"slower for 256-row tiles {where}, fp8_gemm.early_store_loses)")
    return c


def _choose(op, m, n, k, device, sms, *, tuned, autotune, trace, device_sms=None) -> Choice:
    from .ops import get_operator
    say = trace.append if trace is not None else (lambda line: None)
    where = f"{device}, {sms} SMs"
    if not tuned:
        say("measured, nearby, analogous: not asked (DGIR_TUNED=0)")
    if tuned:
        hit = lookup(op, device, sms, m, n, k)
        cfg = valid_config(hit["config"]) if hit is not None else None
        if cfg is not None:
            on = measured_on(hit, device)
            say(f"measured: {cfg.kernel_name()}, {hit.get('us')} us ({hit.get('source', '?')}){on}")
            return Choice(cfg, "measured", f"{where}, M={m}{on}")
        say("measured: " + ("a stale entry, skipped" if hit is not None else f"no entry for {m}x{n}x{k} on {where}"))
        if device_sms is not None:       # a launch on `sms` of the device's SMs (set_num_sms)
            whole = lookup(op, device, device_sms, m, n, k)
            cfg = valid_config(whole["config"]) if whole is not None else None
            if cfg is not None and op == "fp8_gemm_nt":
                from .ops.fp8_gemm import on_fewer_sms
                fewer, why = on_fewer_sms(cfg, m, sms)
                if fewer is not None:
                    say(f"whole device: {fewer.kernel_name()}, the entry for all {device_sms} SMs ({why})")
                    return Choice(fewer, "measured", f"{device}, the entry for all {device_sms} SMs, M={m}")
                say(f"whole device: the entry for all {device_sms} SMs ({cfg.kernel_name()}) does not carry: {why}")
            else:
                say(f"whole device: no entry for {m}x{n}x{k} on all {device_sms} SMs")
    if autotune is not None:
        cfg = autotune()
        say(f"autotuned: {cfg.kernel_name()}")
        return Choice(cfg, "autotuned", where)
    if tuned:
        weighed: list[str] = []
        near = nearby_config(op, m, n, k, device, sms, trace=weighed)
        outgrown = near is not None and outgrown_entry(op, m, n, k, sms, *near)
        if outgrown:
            say(f"nearby: {near[0].kernel_name()}, the entry at M={near[1]}, set aside: {outgrown}")
            near = None
        if near is not None:
            on = measured_on(lookup(op, device, sms, near[1], n, k) or {"device": device}, device)
            say(f"nearby: {near[0].kernel_name()}, the entry at M={near[1]}{on}")
            for line in weighed:
                say(line)
            return Choice(near[0], "nearby", f"{where}, the entry at M={near[1]}{on}")
        elif not outgrown:
            say(f"nearby: no entry for N={n} K={k} near M={m}")
    model = get_operator(op).choose_config(m=m, n=n, k=k, num_sms=sms,
                                           **({"one_cta_per_sm": True} if device_sms is not None else {}))
    say(f"model: {model.kernel_name()}")
    if tuned:
        carried = analogous_config(op, m, n, k, device, sms, model)
        if carried is not None:
            cfg, e, note = carried
            detail = f"carried from N={e['n']} K={e['k']} M={e['m']}{measured_on(e, device)}" + (f"; {note}" if note else "")
            say(f"analogous: the model's pick is of a kind it misjudges here; {cfg.kernel_name()}, {detail}")
            return Choice(cfg, "analogous", f"{where}, {detail}")
        say("analogous: " + (f"not asked (M > {ANALOG_MAX_M})" if m > ANALOG_MAX_M else
                             "not asked (the model's pick is not of a kind it misjudges)" if not _weak(model) else
                             "no measured shape near enough to carry from"))
    return Choice(model, "model", f"{sms} SMs")


# outgrown_entry's bound: the model must rate an outgrown entry's config this many times its own pick's
# time.  Held out (bench/TUNING.md step 104): at 1.2, 24 shapes at M = 136-752 took 0.722x the time
# (spec 238, 0.584-0.906x); from 1.2 down to 1.0, 0.823x at M = 136-188 and 0.966x at M = 1044-6372,
# but at N <= 384 (M = 524-752) the model's 64x24 / 128x32 ran 1.06-1.20x the entries' splits over
# a cluster (spec 240): at narrow N, where those splits are measured and the model misjudges them
# (step 23), the bound stays 1.2.
NEARBY_OUTGROWN = 1.0
NEARBY_OUTGROWN_NARROW = 1.2
NEARBY_OUTGROWN_NARROW_N = 512


def outgrown_entry(op, m, n, k, sms, cfg, entry_m) -> str:
    """Why a nearby entry's config does not stand at M ('' when it does): its tiles take more of an
    SM at M than at the entry's M (more rounds: the entry measured a walk this M does not run),
    and the cost model rates it NEARBY_OUTGROWN times its own pick's time at M or more (at N <=
    NEARBY_OUTGROWN_NARROW_N, NEARBY_OUTGROWN_NARROW).  The table's rows are sparse between M = 128
    and 1024 for most (N, K): 152x4608x7168 took the M = 128 entry's 64x72, one round there and two
    at M = 152, and ran 32.0 us where cuBLAS took 27.2 (spec 237); the model's 64x128 is one round."""
    from .ops.fp8_gemm import sm_load
    if op != "fp8_gemm_nt" or sm_load(m, cfg) <= sm_load(entry_m, cfg):
        return ""
    from .ops.fp8_gemm_model import choose_config, config_seconds
    own = choose_config(m, n, k, sms)
    ratio = config_seconds(m, n, k, cfg) / config_seconds(m, n, k, own)
    if own == cfg or ratio < (NEARBY_OUTGROWN_NARROW if n <= NEARBY_OUTGROWN_NARROW_N else NEARBY_OUTGROWN):
        return ""
    return (f"its load grows {sm_load(entry_m, cfg):g} -> {sm_load(m, cfg):g} and the model rates it "
            f"{ratio:.2f}x its own pick's time")


def _weak(model_cfg) -> bool:
    """The kinds of model pick that measured configs replace (steps 82, 85): a split-K through the
    global workspace, or an unsplit tile narrower than 64 columns."""
    return (model_cfg.split_k > 1 and not model_cfg.split_cluster) or (model_cfg.split_k == 1 and model_cfg.block_n < 64)


def analogous_config(op, m, n, k, device, sms, model_cfg, unstraddle: bool = True, keep_rounds: bool = True):
    """At M <= ANALOG_MAX_M whose (N, K) has no nearby measurement (:func:`analogous`): (the config
    measured for the nearest (N', K') carried over by `carry_config`, that entry, a note on any width
    change), in place of a model pick of the kinds the model misjudges there (`_weak`): a split-K
    reduced through the global workspace (the model does not propose the cluster reduction) or a
    tile narrower than 64 columns without a split (it misses the per-tile fixed costs).  Where the
    model picked an unsplit tile 64 or more columns wide, the carried config measured as fast or up
    to 11% slower (spec 150), so those stay.  Above M = 128 a straddling carried width moves to 32
    or 64 (`unstraddled`); a width whose rounding needs more rounds than the source ran widens
    (`within_rounds`, keep_rounds).  Held out: 0.91x the model pick's time on 25 cells at M <= 128
    (spec 151, bench/TUNING.md step 82), 0.865x on 35 at M = 160-448 (spec 163, step 85).  None
    where none applies."""
    from .ops.fp8_gemm import carry_config, walk_rounds
    if op != "fp8_gemm_nt" or not _weak(model_cfg):
        return None
    e = analogous(op, device, sms, m, n, k)
    src = valid_config(e["config"]) if e is not None else None
    if src is None:
        return None
    carried = carry_config(src, n, k)
    if carried is None:
        return None
    moved = unstraddled(carried, m, e["m"]) if unstraddle and m > SMALL_M else None
    note = f"width {carried.block_n} -> {moved.block_n}: {carried.block_n} straddles B-scale blocks" if moved else ""
    carried = moved or carried
    if keep_rounds and walk_rounds(m, carried) > walk_rounds(e["m"], src):
        wider = within_rounds(carried, m, walk_rounds(e["m"], src))
        if wider is None:
            return None
        note = "; ".join(filter(None, [note, f"width {carried.block_n} -> {wider.block_n}: "
                                              f"{walk_rounds(m, carried)} rounds where the measured config ran "
                                              f"{walk_rounds(e['m'], src)}"]))
        carried = wider
    # a split measured in one round must stay one (multi-round global splits ran 2.1x the best, step 84)
    if carried.split_k > 1 and walk_rounds(m, carried) > walk_rounds(e["m"], carried):
        return None
    return carried, e, note


def within_rounds(cfg, m: int, rounds: int):
    """The narrowest legal wider tile than `cfg`'s (same kind otherwise, stages capped by its shared
    memory) whose walk at M takes at most `rounds`; None if none.  carry_config keeps about the
    count of N tiles, and its rounding can cross a round: 4096/32 = 128 tiles carried to N = 3200 as
    134 24-wide ones, two rounds of 132 where the measured config ran one (spec 167: 24.5 us against
    cuBLAS's 21.5 at 4x3200x9728; with the rule, 0.70x the time at 14 such shapes, spec 168)."""
    from .ops.fp8_gemm import CLUSTER_SPLIT_MAX_BLOCK_N, legal_block_ns, walk_rounds
    for bn in legal_block_ns(cfg.n):
        if bn <= cfg.block_n or (cfg.split_cluster and bn > CLUSTER_SPLIT_MAX_BLOCK_N):
            continue
        out = _with_width(cfg, bn)
        if out is not None and walk_rounds(m, out) <= rounds:
            return out
    return None


def _with_width(cfg, block_n: int):
    """`cfg` with another BLOCK_N, its ring capped by the new tile's shared memory; None if illegal."""
    from dataclasses import replace
    from .ops import OpError
    from .ops.fp8_gemm import check_config, max_stages_for
    out = replace(cfg, block_n=block_n)
    out = replace(out, stages=min(out.stages, max_stages_for(out)))
    try:
        check_config(out)
    except OpError:
        return None
    return out


def unstraddled(cfg, m: int, measured_m: int):
    """A carried tile narrower than 128 that straddles two 128-column B-scale blocks (24, 40, 56, 72,
    80 wide: carry_config keeps the count of N tiles), moved to the nearest width that does not (32
    or 64), the stages capped by its shared memory; None where that is not legal or needs more rounds
    at M than `cfg` did at the M it was measured at.  Above M = 128: at the 20 cells of spec 163
    where the API carried a straddling width, the best 32- or 64-wide split timed beside it took
    0.93x its time; on 26 unseen cells (spec 165) this rule took 0.944x the straddling config's time
    (0.75x to 1.13x, three slower; bench/TUNING.md step 85)."""
    from .ops.fp8_gemm import walk_rounds
    if cfg.block_n >= 128 or 128 % cfg.block_n == 0:
        return None
    out = _with_width(cfg, min((32, 64), key=lambda b: abs(math.log(b / cfg.block_n))))
    return out if out is not None and walk_rounds(m, out) <= walk_rounds(measured_m, cfg) else None


NEARBY_MARGIN = 0.97     # a farther entry's config must be estimated this much faster than a nearer one's:
                         # 0.95 in step 46 (spec 79), 0.97 since step 87 (specs 42, 78, 179: the 3072
                         # entry's estimate at 4097x24576x1536 was 5.0% under the 4096 entry's, and ran 3.9% faster)


def nearby_config(op, m, n, k, device, sms, load=None, trace: list | None = None):
    """(config, its entry's M) measured at a nearby M for the same N and K, or None.  Small M: the
    nearest small measured M's config.  Otherwise the fastest of the entries just below and above M
    (above WIDE_NEARBY_M: of every entry within GRID_RATIO), each entry's measured time scaled by its
    load at M over its load at the entry's M (`sm_load`: the persistent rounds, or with two CTAs per
    SM the CTAs per SM); the nearest entry's config stays unless the fastest of the others is
    estimated NEARBY_MARGIN faster (step 87: compared in turn, nearer first, a 3584 entry between
    blocked a 6144 entry that ran 8% faster at 4097x4096x7168).  Up to
    WIDE_NEARBY_M the walks take one or two rounds, where rounds do not say the time (step 85).
    The device's own entries first; where they give none, the stand-in device's (`_grids`: times of
    one device are weighed against each other; spec 312 found the H100's grid without an entry near
    3548x576x7168, where the model's pick took 1.25x the H200 entry's time).
    trace: a list that gets one line per entry weighed (its config, time and estimate at M)."""
    for grid in _grids(op, device, sms, n, k):      # the device's own entries, then the stand-in's
        found = _nearby_in(grid, op, m, n, k, device, sms, load, trace)
        if found is not None:
            return found
    return None


def _nearby_in(grid, op, m, n, k, device, sms, load, trace):
    """nearby_config over one device's entries for (n, k)."""
    from .ops.fp8_gemm import sm_load
    load = load or sm_load        # bench/narrow_n_specs.py --nearby-load passes walk_rounds (step 85)
    if m <= SMALL_M:
        hit = nearest(op, device, sms, m, n, k, grid)
        cfg = valid_config(hit["config"]) if hit is not None else None
        return (cfg, hit["m"]) if cfg is not None else None
    scored = []      # (scaled time, distance on a log scale, config, M, measured time); nearest first below
    entries = (within_grid_ratio if m > WIDE_NEARBY_M else bracketing)(op, device, sms, m, n, k, grid)
    for e in entries:
        cfg = valid_config(e["config"])
        if cfg is not None and isinstance(e.get("us"), (int, float)) and e["us"] > 0:
            scored.append((e["us"] * load(m, cfg) / load(e["m"], cfg), abs(math.log(e["m"] / m)),
                           cfg, e["m"], e["us"]))
    if not scored:
        return None
    scored.sort(key=lambda x: x[1])
    best = scored[0]            # the nearest entry, scaled the least
    if len(scored) > 1:         # the fastest of the others must win by a margin: each is scaled further
        other = min(scored[1:], key=lambda x: x[0])
        if other[0] < NEARBY_MARGIN * best[0]:
            best = other
    if trace is not None:
        for est, _, cfg, em, us in sorted(scored, key=lambda x: x[3]):
            trace.append(f"  entry at M={em}: {cfg.kernel_name()}, {us:.1f} us there, x{load(m, cfg):g}/{load(em, cfg):g} "
                         f"load -> {est:.1f} us at M={m}" + ("  <- taken" if em == best[3] else ""))
    return best[2], best[3]
