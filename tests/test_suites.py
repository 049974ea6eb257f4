import pytest

from fp8bench.suites import SuiteError, builtin_suites, load_suite
from fp8bench.workloads.shape_sets import SHAPE_SETS, llm_projections


def test_builtin_suites_load_and_expand():
    assert {"smoke", "ci", "square", "llm"} <= set(builtin_suites())
    smoke = load_suite("smoke")
    (entry,) = smoke.entries
    assert entry.workload == "gemm" and len(entry.shapes) >= 2
    assert len(entry.precisions) == 9 and entry.backends == ["torch", "emulated"]
    assert smoke.settings["budget_s"] > 0


def test_shape_sets():
    assert SHAPE_SETS["square"][0] == "256x256x256" and SHAPE_SETS["square"][-1] == "16384x16384x16384"
    # Llama-3 8B at 1024 tokens: fused QKV 6144x4096, O 4096x4096, gate/up 28672x4096, down 4096x14336.
    assert llm_projections((1024,))[:4] == ["1024x6144x4096", "1024x4096x4096", "1024x28672x4096",
                                            "1024x4096x14336"]
    assert len(load_suite("llm").entries[0].shapes) == 24


def test_bad_suites_are_explained(tmp_path):
    with pytest.raises(SuiteError, match="unknown suite 'nope'; built-in suites: ci, "):
        load_suite("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nsettings: {budget: 3}\ncases: []\n")
    with pytest.raises(SuiteError, match="unknown settings budget; accepted: budget_s"):
        load_suite(str(bad))
    bad.write_text("cases:\n  - workload: gemm\n")
    with pytest.raises(SuiteError, match="needs 'shapes'"):
        load_suite(str(bad))
    bad.write_text("cases: [")
    with pytest.raises(SuiteError, match="cannot read suite"):
        load_suite(str(bad))
