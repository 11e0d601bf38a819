"""The `dgir` command line.

    dgir compile OP --m M --n N --k K [--target T] [--dump-dir DIR] [--time-passes]
                    [--plugin MODULE ...] [--from DUMP.dgir] [--no-assemble] [--no-verify]
    dgir passes [--target T] [--plugin MODULE ...]
    dgir diff DUMPDIR PASS_A [PASS_B] [--html OUT]
    dgir schedule DUMP.dgir [--svg OUT]

Every error is one line on stderr, `dgir: error: ...`, with exit code 2 (set DGIR_TRACEBACK=1 to
see the Python traceback instead).

Adding a subcommand: write `add_arguments(parser)` and `run(args) -> int` and register them with
the `@subcommand(name, help)` decorator (here, or in a module listed in `SUBCOMMAND_MODULES`, which
is imported when the parser is built).  Raise `CLIError` (or any dgir error) for user mistakes.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Callable

# modules that define more subcommands with @subcommand (imported lazily; a missing one is skipped)
SUBCOMMAND_MODULES = ["dgir.cli_run"]

_COMMANDS: dict[str, tuple[str, Callable, Callable]] = {}   # name -> (help, add_arguments, run)


class CLIError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def subcommand(name: str, help: str):
    """Register a subcommand: decorate a class (or namespace) with `add_arguments` and `run`."""
    def deco(obj):
        _COMMANDS[name] = (help, obj.add_arguments, obj.run)
        return obj
    return deco


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse would print the usage first)
        cmd = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        raise CLIError(f"{cmd}: {message}" if cmd else message)


# --------------------------------------------------------------------------------------------
# plug-ins
def load_plugin(spec: str) -> None:
    """Import a plug-in module (dotted name, or a path to a .py file); importing it registers passes."""
    try:
        if spec.endswith(".py") or os.sep in spec:
            path = Path(spec)
            if not path.is_file():
                raise CLIError(f"plugin {spec!r}: no such file")
            name = "dgir_plugin_" + path.stem
            mod_spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = mod
            mod_spec.loader.exec_module(mod)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())      # like `python -m`: modules next to you import
            importlib.import_module(spec)
    except CLIError:
        raise
    except ModuleNotFoundError as e:
        raise CLIError(f"plugin {spec!r}: cannot import it ({e})") from None
    except Exception as e:
        raise CLIError(f"plugin {spec!r} failed while loading: {type(e).__name__}: {e}") from None


def _plugins(args) -> None:
    for spec in getattr(args, "plugin", None) or []:
        load_plugin(spec)


def _add_plugin_arg(p) -> None:
    p.add_argument("--plugin", action="extend", nargs="+", metavar="MODULE", default=[],
                   help="import MODULE (dotted name or .py file) first; its import registers passes "
                        "with dgir.register_pass")


# --------------------------------------------------------------------------------------------
@subcommand("compile", "compile an operator; print a summary, optionally write numbered IR dumps")
class Compile:
    @staticmethod
    def add_arguments(p):
        from .pipeline import TARGETS
        p.add_argument("op", help="operator, e.g. fp8_gemm_nt")
        p.add_argument("--m", type=int, help="rows of A and D (a runtime value: only steers the config)")
        p.add_argument("--n", type=int, help="columns of D (compiled in)")
        p.add_argument("--k", type=int, help="reduction length (compiled in)")
        p.add_argument("--target", default="sm90a", metavar="|".join(TARGETS),
                       help="target (default sm90a)")
        p.add_argument("--dump-dir", type=Path, metavar="DIR",
                       help="write DIR/<op>_n.._k.._<hash>/NN_<stage>.dgir, kernel.ptx, kernel.cubin, ...")
        p.add_argument("--time-passes", action="store_true", help="print the time of every stage")
        _add_plugin_arg(p)
        p.add_argument("--from", dest="from_ir", type=Path, metavar="DUMP.dgir",
                       help="resume from a (hand-edited) dump: the passes after its position run; "
                            "dimensions not given are taken from the dump")
        p.add_argument("--no-assemble", action="store_true", help="stop after emitting PTX (no ptxas)")
        p.add_argument("--no-verify", action="store_true",
                       help="do not run the verifier after every pass (it runs by default)")
        p.add_argument("--config", metavar="FIELD=VALUE,...", default="",
                       help="override fields of the chosen tile config, e.g. "
                            "block_m=256,block_n=128,stages=3,cluster=2,multicast=A")

    @staticmethod
    def run(args) -> int:
        import dgir
        from .ops import get_operator
        _plugins(args)
        operator = get_operator(args.op)
        dims = {d: getattr(args, d, None) for d in ("m", "n", "k")}
        dims.update(args.extra_dims)
        dims = {d: v for d, v in dims.items() if v is not None}
        if args.from_ir is not None:
            kernel = _read_dump(args.from_ir)
            for d in operator.dims:
                if d not in dims and isinstance(kernel.get(d), int):
                    dims[d] = kernel.get(d)
            if "m" in operator.dims and "m" not in dims:
                dims["m"] = kernel.get("block_m", 128)    # m is not compiled in: any value will do
        config = _config_override(operator, args.target, dims, args.config) if args.config else None
        res = dgir.compile(args.op, target=args.target, dump_dir=args.dump_dir, assemble=not args.no_assemble,
                           verify=not args.no_verify, from_ir=args.from_ir, config=config, **dims)
        print(res.summary())
        if args.time_passes:
            print(format_timings(res.timings))
        return 0


def _config_override(operator, target: str, dims: dict, spec: str):
    """The config `dgir compile` would choose (dgir.compiler.default_choice) with FIELD=VALUE overrides
    (values parsed as the field's type)."""
    import dataclasses
    from .compiler import default_choice
    missing = [d for d in operator.dims if d not in dims]
    if missing:
        raise CLIError(f"--config needs the dimensions {', '.join('--' + d for d in missing)}")
    choice = default_choice(operator, target, dims)
    base = choice.config
    if not dataclasses.is_dataclass(base):
        raise CLIError(f"{operator.name}: its config cannot be overridden field by field")
    fields = {f.name: f for f in dataclasses.fields(base)}
    changes = {}
    for item in (x for x in spec.split(",") if x):
        key, sep, value = item.partition("=")
        if not sep or key not in fields:
            raise CLIError(f"--config: {item!r} is not FIELD=VALUE with FIELD one of {', '.join(fields)}")
        kind = type(getattr(base, key))
        try:
            changes[key] = kind(value)
        except ValueError:
            raise CLIError(f"--config: {key} takes a {kind.__name__}, got {value!r}") from None
    from .tuning import Choice
    return Choice(dataclasses.replace(base, **changes), choice.source,
                  "; ".join(filter(None, [choice.detail, "overridden: " + spec])))


def format_timings(timings: dict) -> str:
    total = timings.get("total") or sum(v for k, v in timings.items() if k != "total") or 1e-12
    lines = ["===== pass timing =====", f"{'stage':32} {'ms':>10} {'%':>6}"]
    for k, v in timings.items():
        if k == "total":
            continue
        lines.append(f"{k:32} {v * 1e3:10.2f} {100 * v / total:6.1f}")
    lines.append(f"{'total':32} {total * 1e3:10.2f} {100.0:6.1f}")
    return "\n".join(lines)


def _read_dump(path: Path):
    from .parser import ParseError, parse_ir
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise CLIError(f"no such dump file: {path}") from None
    except IsADirectoryError:
        raise CLIError(f"{path} is a directory, expected a .dgir dump file") from None
    try:
        return parse_ir(text)
    except ParseError as e:
        raise CLIError(f"{path}: {e}") from None


# --------------------------------------------------------------------------------------------
@subcommand("passes", "list a target's pass pipeline with each pass's documentation")
class Passes:
    @staticmethod
    def add_arguments(p):
        from .pipeline import TARGETS
        p.add_argument("--target", choices=TARGETS, help="one target (default: every target)")
        _add_plugin_arg(p)

    @staticmethod
    def run(args) -> int:
        import inspect

        from .pipeline import TARGETS, pipeline
        _plugins(args)
        out = []
        for t in [args.target] if args.target else TARGETS:
            try:
                passes = pipeline(t)
            except ImportError:
                if args.target:
                    raise CLIError(f"target {t!r} has no pass pipeline yet") from None
                out.append(f"{t}: (no pass pipeline yet)\n")
                continue
            out.append(f"{t}: {len(passes)} passes (dump 00 is the lowered IR)")
            for i, p in enumerate(passes, 1):
                doc = inspect.getdoc(type(p)) or inspect.getdoc(p) or "(no docstring)"
                src = type(p).__module__
                out.append(f"\n  {i:02d} {p.name}    [{src}]")
                out.extend("       " + line if line else "" for line in doc.splitlines())
            out.append("")
        extra = _optional_passes({p.name for t in TARGETS for p in _safe_pipeline(t)})
        if extra:
            out.append("optional passes (not in a pipeline; add one with dgir.register_pass or --plugin):")
            for p in extra:
                first = (inspect.getdoc(type(p)) or "").split("\n\n")[0].replace("\n", " ").split(". ")[0] + "."
                out.append(f"  {p.name}    [{type(p).__module__}]\n       {first}")
        print("\n".join(out).rstrip())
        return 0


def _safe_pipeline(target: str) -> list:
    from .pipeline import pipeline
    try:
        return pipeline(target)
    except ImportError:
        return []


def _optional_passes(used: set) -> list:
    """PASS objects of dgir.passes modules that no pipeline runs (research passes to register)."""
    import importlib
    import pkgutil

    from . import passes as pkg
    out = []
    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.ispkg:
            continue
        p = getattr(importlib.import_module(f"{pkg.__name__}.{mod.name}"), "PASS", None)
        if p is not None and getattr(p, "name", None) not in used:
            out.append(p)
    return out


# --------------------------------------------------------------------------------------------
@subcommand("diff", "diff two numbered dumps of a kernel, or one pass's input and output")
class Diff:
    @staticmethod
    def add_arguments(p):
        p.add_argument("dump_dir", type=Path, metavar="DUMPDIR", help="a kernel's dump directory")
        p.add_argument("a", metavar="PASS_A", help="pass name, name#2 (second run), NN_name or NN")
        p.add_argument("b", metavar="PASS_B", nargs="?",
                       help="second stage; omitted: diff PASS_A's input against its output")
        p.add_argument("--html", type=Path, metavar="OUT", help="also write a side-by-side HTML page")
        p.add_argument("-U", "--context", type=int, default=3, help="lines of context (default 3)")

    @staticmethod
    def run(args) -> int:
        from . import diff
        try:
            before, after = diff.pair(args.dump_dir, args.a, args.b)
            text = diff.unified(before, after, args.context)
            if args.html:
                args.html.parent.mkdir(parents=True, exist_ok=True)
                args.html.write_text(diff.html(before, after, args.context))
        except diff.DiffError as e:
            raise CLIError(str(e)) from None
        if text:
            sys.stdout.write(text)
        else:
            print(f"dgir: {before.stem} and {after.stem} are identical", file=sys.stderr)
        if args.html:
            print(f"dgir: wrote {args.html}", file=sys.stderr)
        return 0


# --------------------------------------------------------------------------------------------
@subcommand("schedule", "draw the warp-role timeline of a dump (SVG, or text on stdout)")
class Schedule:
    @staticmethod
    def add_arguments(p):
        p.add_argument("dump", type=Path, metavar="DUMP.dgir")
        p.add_argument("--svg", type=Path, metavar="OUT", help="write an SVG timeline to OUT")

    @staticmethod
    def run(args) -> int:
        from . import schedule_svg
        from .ir import Op
        from .parser import parse_header
        kernel = _read_dump(args.dump)
        if kernel.op is not Op.KERNEL:
            raise CLIError(f"{args.dump}: top-level op is {kernel.op.value}, expected kernel")
        pos = parse_header(args.dump.read_text()).get("position")
        if args.svg:
            title = f"%{kernel.name}" + (f"  @ {pos}" if pos else "")
            args.svg.parent.mkdir(parents=True, exist_ok=True)
            args.svg.write_text(schedule_svg.render_svg(kernel, title))
            print(f"dgir: wrote {args.svg}", file=sys.stderr)
        else:
            sys.stdout.write(schedule_svg.render_text(kernel))
        return 0


# --------------------------------------------------------------------------------------------
@subcommand("choose", "show how the API chooses a shape's tile config: each step asked, the cost model's best candidates")
class Choose:
    @staticmethod
    def add_arguments(p):
        from .tuning import TARGET_DEVICE
        device, sms = TARGET_DEVICE["sm90a"]
        p.add_argument("op", help="operator, e.g. fp8_gemm_nt")
        p.add_argument("--m", type=int, required=True)
        p.add_argument("--n", type=int, required=True)
        p.add_argument("--k", type=int, required=True)
        p.add_argument("--device", default=device, help=f"device name of the measurements (default {device!r})")
        p.add_argument("--sms", type=int, default=sms, help=f"its SM count (default {sms})")
        p.add_argument("--num-sms", type=int, default=None, metavar="N",
                       help="as deep_gemm.set_num_sms(N): the GEMM may use N of those SMs, one CTA per SM")
        p.add_argument("--top", type=int, default=5, metavar="N", help="cost-model candidates to list (default 5)")

    @staticmethod
    def run(args) -> int:
        from .env import env
        from .ops import get_operator
        from .tuning import choose
        operator = get_operator(args.op)
        if operator.name != "fp8_gemm_nt":
            raise CLIError(f"choose: {args.op} has no measured configs or sm90a cost model (fp8_gemm_nt has)")
        operator.check(m=args.m, n=args.n, k=args.k)
        sms, part = args.sms, False
        if args.num_sms is not None:
            if not 1 <= args.num_sms <= args.sms:
                raise CLIError(f"choose: --num-sms must be in 1..{args.sms} (--sms); got {args.num_sms}")
            sms, part = args.num_sms, args.num_sms < args.sms
        steps: list[str] = []
        choice = choose(args.op, args.m, args.n, args.k, args.device, sms, tuned=env().tuned, trace=steps,
                        device_sms=args.sms)
        for line in steps:
            print(f"  {line}")
        print(f"chosen   {choice.describe()}\n         {choice.config.kernel_name()}")
        from . import deep_gemm
        rows, limit = choice.config.block_m, deep_gemm.SFA_K_MAJOR_MAX_BLOCK_M
        how = (f"read in place ({rows}-row tile, <= {limit}): no transpose launch"
               if deep_gemm.row_major_sfa_read_in_place(choice.config) else
               f"staged MN-major by a transpose launch ({rows}-row tile, > {limit})"
               if deep_gemm.SFA_K_MAJOR_IN_PLACE else "staged MN-major by a transpose launch (in-place read off)")
        print(f"sfa      row-major contiguous SFA {how}")
        from .ops.fp8_gemm_model import FIRST_FIT, ONE_BLOCK_192, candidate_configs, config_seconds, params_for
        params = params_for(args.m)
        label = "FIRST_FIT" if params is FIRST_FIT else "ONE_BLOCK_192" if params is ONE_BLOCK_192 else "REFIT"
        ranked = sorted(candidate_configs(args.m, args.n, args.k, sms, one_cta_per_sm=part),
                        key=lambda c: config_seconds(args.m, args.n, args.k, c, params))
        print(f"cost model ({label} at M={args.m}), best {args.top}:")
        for c in ranked[:args.top]:
            print(f"  {config_seconds(args.m, args.n, args.k, c, params) * 1e6:8.1f} us  {c.kernel_name()}")
        if choice.source != "model":
            print(f"  {config_seconds(args.m, args.n, args.k, choice.config, params) * 1e6:8.1f} us  "
                  f"{choice.config.kernel_name()}  (the chosen config, as the model scores it)")
        return 0


@subcommand("env", "list every environment variable dgir reads, its value now and what it does")
class Env:
    @staticmethod
    def add_arguments(p):
        pass

    @staticmethod
    def run(args) -> int:
        from .env import VARIABLES, env
        env()                           # a malformed value is reported here, naming the variable
        width = max(map(len, VARIABLES))
        for name, doc in VARIABLES.items():
            value = os.environ.get(name)
            print(f"{name:<{width}}  {'(unset)' if value is None else repr(value):<12}  {doc}")
        return 0


# --------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    for mod in SUBCOMMAND_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
    parser = _Parser(prog="dgir", description="dgir: a tile-IR compiler for DeepGEMM-class GEMM kernels")
    parser.add_argument("--version", action="version", version=f"dgir {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name, (help, add_arguments, run) in _COMMANDS.items():
        p = sub.add_parser(name, help=help, description=help)
        add_arguments(p)
        p.set_defaults(_run=run)
    return parser


def _extra_dims(extras: list[str]) -> dict:
    """`--groups 4` / `--groups=4` after `compile OP`: dimensions of operators beyond m, n, k."""
    dims, i = {}, 0
    while i < len(extras):
        tok = extras[i]
        if not tok.startswith("--") or len(tok) < 3:
            raise CLIError(f"unrecognized argument {tok!r}")
        name, eq, val = tok[2:].partition("=")
        if not eq:
            if i + 1 >= len(extras):
                raise CLIError(f"argument --{name}: expected a value")
            val, i = extras[i + 1], i + 1
        try:
            dims[name.replace("-", "_")] = int(val)
        except ValueError:
            raise CLIError(f"unrecognized argument --{name} (dimensions take integers, got {val!r})") from None
        i += 1
    return dims


def _errors():
    """Exception types reported as one line (anything else too, as an internal error)."""
    from .ops import OpError
    from .parser import ParseError
    from .pipeline import PassError
    from .verifier import VerifyError
    return (CLIError, OpError, ParseError, PassError, VerifyError)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args, extras = parser.parse_known_args(argv)
        if extras and args.command not in ("compile", "run"):
            raise CLIError(f"unrecognized arguments: {' '.join(extras)}")
        args.extra_dims = _extra_dims(extras) if extras else {}
        return int(args._run(args) or 0)
    except SystemExit as e:                      # --help / --version
        return e.code if isinstance(e.code, int) else 0
    except BrokenPipeError:                      # `dgir diff ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        print("dgir: interrupted", file=sys.stderr)
        return 130
    except BaseException as e:  # noqa: BLE001 - every error is one line, never a traceback
        if _traceback_wanted():
            raise
        known = isinstance(e, _errors())
        msg = str(e).strip().replace("\n", " ") or type(e).__name__
        if isinstance(e, OSError) and e.filename is not None:
            msg = f"{e.strerror or type(e).__name__}: {e.filename}"
        elif not known:
            msg = f"{type(e).__name__}: {msg}"
        print(f"dgir: error: {msg}", file=sys.stderr)
        return 2


def _traceback_wanted() -> bool:
    from .env import env
    try:
        return env().traceback
    except ValueError:       # a malformed DGIR_* value: that error is the one-line message itself
        return False


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
