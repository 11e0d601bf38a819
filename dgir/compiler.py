"""dgir.compile: operator -> tile IR -> passes -> PTX -> cubin (+ SASS, resources), with dumps."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .env import env
from .ir import Node
from .ops import OpError, get_operator
from .parser import parse_header, parse_ir
from .pipeline import identity, pipeline, run_pipeline
from .printer import print_ir
from .tuning import TARGET_DEVICE, Choice, choose


@dataclass
class CompileResult:
    """What `dgir.compile` returns.

    op, dims, config   the operator, the dimensions asked for, the chosen tile config
    config_source      where the config came from (dgir.tuning.Choice.describe(): "given", "measured
                       (NVIDIA H200, 132 SMs, M=64)", "nearby (...)", "model (132 SMs)", ...)
    name               the kernel's entry name
    stages             [(stem, Node)]: the IR after the lowering ("00_lower_gemm") and each pass
                       (.decisions(): the kernel attributes each pass set, its decisions and why)
    ir                 the final IR (the one the emitter read)
    ptx, cubin, sass   emitter output, ptxas output, nvdisasm listing (sass is "" if nvdisasm is absent)
    ascendc            AscendC C++ source (Ascend targets; written as kernel.cpp in the dump)
    resources          ptxas -v report: registers, spills, shared memory, ...
    warnings           ptxas warnings (e.g. serialised wgmma) - treated as emitter bugs in tests
    loop_mix           the K loop's SASS instruction mix (dgir.loop_mix.LoopMix), where sass is listed
    timings            seconds per stage (lowering, each pass, emit, ptxas, nvdisasm)
    dump_dir           the directory written when dump_dir was given
    cache_key          hash of IR text, pipeline identity and toolchain: the kernel cache key
    """
    op: str
    dims: dict
    config: object
    name: str
    target: str
    config_source: str = ""
    stages: list = field(default_factory=list)
    ir: Node | None = None
    ptx: str = ""
    cubin: bytes = b""
    sass: str = ""
    resources: object = None
    warnings: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    dump_dir: Path | None = None
    cache_key: str = ""
    pipeline_id: str = ""
    ascendc: str = ""
    loop_mix: object = None

    def stage(self, name: str) -> Node:
        """IR after the named pass (or stem like '03_interleave_ffma')."""
        for stem, k in self.stages:
            if stem == name or stem.split("_", 1)[1] == name:
                return k
        raise KeyError(f"no stage {name!r}; stages: {[s for s, _ in self.stages]}")

    def diff(self, a: str, b: str | None = None, context: int = 3) -> str:
        """Unified diff of the IR text between stages `a` and `b`, or with `b` omitted, what pass `a`
        changed (its input against its output).  Stages are named as `dgir diff` names them: the pass
        name (`interleave_ffma`), `name#2` for a second run, the stem (`06_interleave_ffma`) or the
        number (`6`); the same text as `dgir diff` over this result's dump directory."""
        from .diff import Stage, pair_of, unified_lines
        from .printer import print_ir
        listed = [Stage(int(seq), name, Path(f"{stem}.dgir"))
                  for stem, _ in self.stages for seq, name in [stem.split("_", 1)]]
        before, after = pair_of(listed, a, b)
        ir = dict(self.stages)
        return unified_lines(print_ir(ir[before.stem]).splitlines(keepends=True),
                             print_ir(ir[after.stem]).splitlines(keepends=True),
                             before.path.name, after.path.name, context)

    def decisions(self) -> list[tuple[str, dict]]:
        """[(stage stem, {attr: value})]: what each pass recorded on the kernel and on its loops, in
        pipeline order (its decision and why, e.g. promote_scales' straddle_promotion, stage_b_scales'
        b_scales, interleave_ffma's interleave on the math K loop: "mma %kbl.interleave"), read off the
        stages."""
        from .ir import Op

        def recorded(k: Node) -> dict:
            out = dict(k.a)
            for region in k.body:
                if region.op is not Op.WARPGROUP:
                    continue
                role = region.get("roles", ("",))[0]     # a loop by its name in its region's first role
                for n in region.walk():
                    if n.op is Op.FOR:
                        out.update({f"{role} %{n.name}.{a}": v for a, v in n.a.items()})
            return out

        out = []
        for (_, before), (stem, after) in zip(self.stages, self.stages[1:]):
            was, now = recorded(before), recorded(after)
            changed = {k: v for k, v in now.items() if was.get(k) != v}
            if changed:
                out.append((stem, changed))
        return out

    def summary(self) -> str:
        cfg = self.config
        lines = [f"kernel   {self.name}  (target {self.target})"]
        if cfg is not None:
            lines.append("config   " + ", ".join(f"{k}={v}" for k, v in vars(cfg).items()))
        if self.config_source:
            lines.append(f"chosen   {self.config_source}")
        lines.append("stages   " + "  ".join(s for s, _ in self.stages))
        for i, (stem, changed) in enumerate(self.decisions()):
            said = ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in changed.items())
            lines.append(f"{'decided' if i == 0 else '':9s}{stem.split('_', 1)[1]}: {said}")
        if self.resources is not None:
            r = self.resources
            lines.append(f"ptxas    {r.registers} registers, {r.spill_stores} B spill stores, "
                         f"{r.spill_loads} B spill loads, {self.ir.get('smem_bytes')} B dynamic smem")
        for w in self.warnings:
            lines.append(f"warning  {w}")
        if self.loop_mix is not None:
            lines.append(f"k-loop   {self.loop_mix.describe()}")
        t = self.timings
        lines.append("time     " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in t.items()))
        if self.dump_dir:
            lines.append(f"dumps    {self.dump_dir}")
        return "\n".join(lines)


def _dump_name(op: str, dims: dict, compiled: tuple, cfg_key: str) -> str:
    return "_".join([op] + [f"{d}{dims[d]}" for d in compiled] + [cfg_key])


def default_choice(operator, target: str, dims: dict) -> Choice:
    """The config `compile` uses when none is given: for a GPU target, the one the API (dgir.deep_gemm)
    would run on the target's reference device (tuning.TARGET_DEVICE: measured table, nearby entry,
    cost model, analogous entry; DGIR_TUNED=0: the model alone), so a dump shows the kernel a call of
    that shape runs there.  DG_AUTOTUNE needs a GPU and is not consulted here."""
    if target in ("ascend950", "ascend910b"):
        from .ops.ascend_gemm import chip_of
        if operator.ascend is None:
            raise OpError(f"{operator.name} has no Ascend lowering (targets: sm90a)")
        return Choice(operator.ascend.choose_config(chip_of(target), **dims), "model", chip_of(target))
    if target in TARGET_DEVICE and set(dims) == {"m", "n", "k"}:
        device, sms = TARGET_DEVICE[target]
        return choose(operator.name, dims["m"], dims["n"], dims["k"], device, sms, tuned=env().tuned)
    return Choice(operator.choose_config(**dims), "model")


def _as_choice(operator, target: str, dims: dict, config) -> Choice:
    if config is None:
        return default_choice(operator, target, dims)
    return config if isinstance(config, Choice) else Choice(config, "given")


def compile(op: str, *, target: str = "sm90a", dump_dir: str | os.PathLike | None = None,
            passes: list | None = None, assemble: bool = True, verify: bool | None = None,
            config=None, from_ir: str | os.PathLike | None = None, **dims) -> CompileResult:
    """Compile operator `op` for `target`.

    dims: the operator's dimensions (fp8_gemm_nt: m, n, k; m only steers the config choice).
    config: the tile config (or a dgir.tuning.Choice); None: `default_choice`.
    passes: run exactly this list instead of the target pipeline.  dump_dir: write one numbered
    .dgir per stage plus .ptx/.cubin/.sass/resources.txt under dump_dir/<kernel>/.  from_ir: resume
    from a (hand-edited) dump file; the passes after its pipeline position run.
    """
    t_start = time.perf_counter()
    operator = get_operator(op)
    missing = [d for d in operator.dims if d not in dims]
    unknown = [d for d in dims if d not in operator.dims]
    if missing or unknown:
        raise OpError(f"{op} takes dimensions {', '.join(operator.dims)}"
                      + (f"; missing {', '.join(missing)}" if missing else "")
                      + (f"; unknown {', '.join(unknown)}" if unknown else ""))
    if target in ("ascend950", "ascend910b"):
        return _compile_ascend(operator, target, dims, dump_dir, passes, verify, config, from_ir, t_start)
    operator.check(**dims)
    from .pipeline import TARGETS
    if target not in TARGETS:
        raise OpError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    if operator.lower is None:
        raise OpError(f"{op} has no {target} lowering (it exists for: ascend950, ascend910b)")
    verify = env().verify if verify is None else verify
    timings: dict[str, float] = {}
    choice = _as_choice(operator, target, dims, config)
    cfg = choice.config
    full = pipeline(target) if passes is None else list(passes)
    t0 = time.perf_counter()
    start_seq, lowering_name = 0, "lower_gemm"
    earlier: list = []
    if from_ir is not None:
        text = Path(from_ir).read_text()
        kernel = parse_ir(text)
        pos = parse_header(text).get("position", "")
        seq_s, _, done = pos.partition("_")
        start_seq = int(seq_s) if seq_s.isdigit() else 0
        if start_seq and start_seq <= len(full) and full[start_seq - 1].name == done:
            full = full[start_seq:]                       # the pass at that position (also a 2nd run)
        elif start_seq:
            names = [p.name for p in full]
            if done not in names:
                raise OpError(f"{from_ir}: its position {pos!r} names no pass of the {target} pipeline "
                              f"({', '.join(names)}); was it written with a --plugin?")
            full = full[names.index(done) + 1:]
        cfg = _config_from_kernel(cfg, kernel, operator, from_ir) if config is None else cfg
        if verify:
            from .verifier import VerifyError, verify as _verify
            try:
                _verify(kernel)
            except VerifyError as e:
                raise VerifyError(f"{from_ir}: {e}") from None
        # the stages before the resumed one, when they sit next to it: the new dump stays complete
        for p in sorted(Path(from_ir).parent.glob("[0-9][0-9]_*.dgir")):
            if p.stem[:2].isdigit() and int(p.stem[:2]) < start_seq and p.resolve() != Path(from_ir).resolve():
                earlier.append((p.stem, parse_ir(p.read_text())))
    else:
        kernel = operator.lower(cfg)
    timings["lower"] = time.perf_counter() - t0

    stages: list = []
    listeners = [lambda ev: stages.append((ev.stem, ev.after)),
                 lambda ev: timings.__setitem__(ev.stem, ev.seconds) if ev.seq else None]
    if from_ir is not None and start_seq:    # (a dump without a position counts as the lowered IR)
        stages.extend(earlier)
        stages.append((Path(from_ir).stem, kernel))
    final = run_pipeline(kernel, full, listeners, verify_each=verify, lowering_name=lowering_name,
                         start_seq=start_seq if from_ir else 0)
    res = CompileResult(op=op, dims=dict(dims), config=cfg, name=final.name, target=target,
                        config_source=choice.describe(), stages=stages,
                        ir=final, timings=timings, pipeline_id=identity(full))

    from .emitters.ptx import emit_ptx
    t0 = time.perf_counter()
    res.ptx = emit_ptx(final)
    timings["emit"] = time.perf_counter() - t0
    if assemble:
        from . import toolchain
        t0 = time.perf_counter()
        asm = toolchain.assemble(res.ptx)
        timings["ptxas"] = time.perf_counter() - t0
        res.cubin, res.resources, res.warnings = asm.cubin, asm.resources, asm.warnings
        if dump_dir is not None or env().dump_sass:
            t0 = time.perf_counter()
            try:
                res.sass = toolchain.disassemble(res.cubin)
            except toolchain.ToolchainError as e:
                res.sass = f"// nvdisasm unavailable: {e}\n"
            timings["nvdisasm"] = time.perf_counter() - t0
            if final.get("op") == "fp8_gemm_nt":     # its K blocks: dgir.loop_mix.wgmmas_per_k_block
                from .loop_mix import k_loop_mix
                res.loop_mix = k_loop_mix(res.sass, final)
    res.cache_key = hashlib.sha256("\n".join([print_ir(final), res.pipeline_id]).encode()).hexdigest()
    timings["total"] = time.perf_counter() - t_start
    if dump_dir is not None:
        res.dump_dir = write_dumps(res, Path(dump_dir), _dump_name(op, dims, operator.compiled_dims, cfg.key()))
    return res


def _compile_ascend(operator, target, dims, dump_dir, passes, verify, config, from_ir, t_start) -> CompileResult:
    """Ascend targets: the operator's Ascend lowering, the target's pipeline, the AscendC emitter."""
    from .ops.ascend_gemm import chip_of
    op = operator.name
    if operator.ascend is None:
        raise OpError(f"{op} has no Ascend lowering (targets: sm90a)")
    if from_ir is not None:
        raise OpError("--from (resuming from a dump) is not supported for Ascend targets yet")
    chip = chip_of(target)
    operator.ascend.check(chip, **dims)
    verify = env().verify if verify is None else verify
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    choice = _as_choice(operator, target, dims, config)
    cfg = choice.config
    kernel = operator.ascend.lower(cfg)
    timings["lower"] = time.perf_counter() - t0
    full = pipeline(target) if passes is None else list(passes)
    stages: list = []
    listeners = [lambda ev: stages.append((ev.stem, ev.after)),
                 lambda ev: timings.__setitem__(ev.stem, ev.seconds) if ev.seq else None]
    final = run_pipeline(kernel, full, listeners, verify_each=verify, lowering_name="lower_gemm")
    res = CompileResult(op=op, dims=dict(dims), config=cfg, name=final.name, target=target, config_source=choice.describe(),
                        stages=stages, ir=final, timings=timings, pipeline_id=identity(full))
    from .emitters.ascendc import emit_ascendc
    t0 = time.perf_counter()
    res.ascendc = emit_ascendc(final)
    timings["emit"] = time.perf_counter() - t0
    res.cache_key = hashlib.sha256("\n".join([print_ir(final), res.pipeline_id]).encode()).hexdigest()
    timings["total"] = time.perf_counter() - t_start
    if dump_dir is not None:
        res.dump_dir = write_dumps(res, Path(dump_dir), _dump_name(op, dims, operator.compiled_dims, cfg.key()))
    return res


def _config_from_kernel(cfg, kernel: Node, operator, from_ir):
    """Resuming from a dump: the config is the one the dump was compiled with (its kernel attrs)."""
    import dataclasses
    if not dataclasses.is_dataclass(cfg):
        return cfg
    for d in operator.compiled_dims:
        if kernel.get(d) is not None and getattr(cfg, d, kernel.get(d)) != kernel.get(d):
            raise OpError(f"{from_ir} was compiled for {d}={kernel.get(d)}, not {d}={getattr(cfg, d)}")
    over = {f.name: kernel.get(f.name) for f in dataclasses.fields(cfg)
            if isinstance(kernel.get(f.name), type(getattr(cfg, f.name)))}
    return dataclasses.replace(cfg, **over)


def write_dumps(res: CompileResult, root: Path, name: str) -> Path:
    """Write every stage into a temp directory and move it into place: never a partial dump."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    for stem, k in res.stages:
        (tmp / f"{stem}.dgir").write_text(print_ir(k, res.target, stem))
    if res.ascendc:
        (tmp / "kernel.cpp").write_text(res.ascendc)
    else:
        (tmp / "kernel.ptx").write_text(res.ptx)
    if res.cubin:
        (tmp / "kernel.cubin").write_bytes(res.cubin)
    if res.sass:
        (tmp / "kernel.sass").write_text(res.sass)
    if res.resources is not None:
        r = res.resources
        (tmp / "resources.txt").write_text(
            f"registers {r.registers}\nspill_stores {r.spill_stores}\nspill_loads {r.spill_loads}\n"
            f"stack_bytes {r.stack_bytes}\nsmem_static {r.smem_static}\nsmem_dynamic {res.ir.get('smem_bytes')}\n"
            + "".join(f"warning {w}\n" for w in res.warnings)
            + (f"k_loop_instructions_per_k_block {res.loop_mix.per_k_block():g}\n"
               f"k_loop_instructions_executed_per_k_block {res.loop_mix.executed_per_k_block():g}\n"
               + "".join(f"k_loop_{group} {v:g}\n" for group, v in res.loop_mix.groups().items())
               if res.loop_mix is not None else ""))
    final = root / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final
