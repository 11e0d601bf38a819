from pathlib import Path

import pytest

from dgir.env import VARIABLES, Env, env, parse_bool

BOOL_VARS = {
    "DGIR_VERIFY": "verify", "DG_JIT_DEBUG": "jit_debug", "DG_PRINT_CONFIGS": "print_configs",
    "DG_JIT_DUMP_PTX": "dump_ptx", "DG_JIT_DUMP_SASS": "dump_sass",
    "DGIR_SASS_INTERLEAVE": "sass_interleave", "DGIR_TRACEBACK": "traceback",
}


@pytest.fixture
def clean(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults(clean):
    e = env()
    assert isinstance(e, Env)
    assert e.verify is False and e.sass_interleave is False and e.jit_debug is False
    assert e.ptxas is None and e.nvdisasm is None and e.cuda_home is None and e.dump_dir is None
    assert e.cache_dir == Path.home() / ".dgir" / "cache"


@pytest.mark.parametrize("var,field", sorted(BOOL_VARS.items()))
@pytest.mark.parametrize("text,value", [("1", True), ("true", True), ("YES", True),
                                        (" on ", True), ("0", False), ("false", False),
                                        ("No", False), ("off", False), ("", False)])
def test_bools(clean, var, field, text, value):
    clean.setenv(var, text)
    assert getattr(env(), field) is value


@pytest.mark.parametrize("var", sorted(BOOL_VARS))
def test_bad_bool_names_variable(clean, var):
    clean.setenv(var, "maybe")
    with pytest.raises(ValueError, match=var):
        env()


def test_paths(clean, tmp_path):
    clean.setenv("DGIR_PTXAS", str(tmp_path / "ptxas"))
    clean.setenv("DGIR_NVDISASM", str(tmp_path / "nvdisasm"))
    clean.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    clean.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    clean.setenv("DGIR_DUMP_DIR", "~/dumps")
    e = env()
    assert e.ptxas == tmp_path / "ptxas" and e.nvdisasm == tmp_path / "nvdisasm"
    assert e.cuda_home == tmp_path / "cuda" and e.cache_dir == tmp_path / "cache"
    assert e.dump_dir == Path.home() / "dumps"


def test_reads_each_call_and_is_frozen(clean):
    assert env().verify is False
    clean.setenv("DGIR_VERIFY", "1")
    e = env()
    assert e.verify is True
    with pytest.raises(Exception):
        e.verify = False  # frozen dataclass


def test_explicit_mapping_and_parse_bool():
    assert env({"DG_JIT_DUMP_PTX": "on"}).dump_ptx is True
    assert parse_bool("X", None, default=True) is True
    with pytest.raises(ValueError, match="FOO"):
        parse_bool("FOO", "2")


def test_every_field_documented():
    import dataclasses
    assert len(dataclasses.fields(Env)) == len(VARIABLES) == 15


def test_ascend_emulator_cache_is_read_here(clean, tmp_path):
    from dgir import ascend_run
    assert env().ascend_emu_cache is None
    clean.setenv("DGIR_ASCEND_EMU_CACHE", str(tmp_path / "emu"))
    assert env().ascend_emu_cache == tmp_path / "emu"
    assert ascend_run.cache_dir() == tmp_path / "emu" and (tmp_path / "emu").is_dir()


def test_the_memoised_snapshot_follows_every_change_of_the_environment(monkeypatch, tmp_path):
    """env() parses once per distinct set of raw values (it is on the API's plan-building path), and
    still sees every change made through os.environ: a variable set, changed, unset, and HOME, on
    which the default cache directory and any "~" depend."""
    from dgir.env import env
    monkeypatch.delenv("DG_PRINT_CONFIGS", raising=False)
    monkeypatch.delenv("DG_JIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "a"))
    first = env()
    assert env() is first                                     # memoised: the same snapshot
    assert not first.print_configs and first.cache_dir == tmp_path / "a" / ".dgir" / "cache"
    monkeypatch.setenv("DG_PRINT_CONFIGS", "yes")
    assert env().print_configs
    monkeypatch.setenv("DG_PRINT_CONFIGS", "off")
    assert not env().print_configs
    monkeypatch.setenv("HOME", str(tmp_path / "b"))
    assert env().cache_dir == tmp_path / "b" / ".dgir" / "cache"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", "~/kernels")
    assert env().cache_dir == tmp_path / "b" / "kernels"
    monkeypatch.setenv("DG_JIT_DEBUG", "maybe")
    with pytest.raises(ValueError, match="DG_JIT_DEBUG"):
        env()
