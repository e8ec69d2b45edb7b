"""``aotkernels bench``: the command line, the reference formulas, the checks and the reports.

CPU: the arguments (help, typos refused before torch starts), every reference formula against
an independent float64 evaluation, ``close`` and ``fp8_close`` accepting what is within the
tolerance and refusing what is not, each suite's check run on torch's own results (anchors as
"ours", then corrupted), the suites' case tables and shape lists, and the rows, tables and JSON.
GPU: each suite's check passes on our kernels (what the benchmark asserts before timing).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aotkernels.bench import (
    attention,
    cli,
    common,
    elementwise,
    frontends,
    gemm,
    norm,
    quant,
    reference,
    report,
    rope,
    timing,
)
from aotkernels.cli import main as aotkernels_main

torch = pytest.importorskip("torch")


def args(**given: Any) -> argparse.Namespace:
    """The parsed defaults of ``bench <what>``, with ``given`` replacing some."""
    ns = cli.parser().parse_args([given.pop("what", "all")])
    for k, v in given.items():
        setattr(ns, k, v)
    return ns


def randn(*shape: int, dtype: Any = torch.float32, seed: int = 0) -> Any:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


# --- command line --------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--help"], ["gemm", "--help"]])
def test_help_through_both_entries(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    for entry in (cli.main, lambda a: aotkernels_main(["bench", *a])):
        with pytest.raises(SystemExit) as e:
            entry(argv)
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: aotkernels bench")
        for suite in cli.MODULES:  # every suite listed with its own description
            assert f"\n  {suite:12} {cli.suite_help(suite)[:40]}" in out


def test_module_entry_runs_the_same_parser() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "aotkernels.bench", "gemm", "--dtypes", "fp4"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 2
    assert "--dtypes: ['fp4'] not run by gemm" in r.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gemm", "--dtypes", "f32"], "--dtypes: ['f32'] not run by gemm"),
        (["all", "--dtypes", "bf16,fp4"], "--dtypes: ['fp4'] not run by all"),
        (["gemm", "--shapes", "square,tall"], "--shapes: unknown ['tall']"),
        (["norm", "--ops", "rms_norm,rmsnorm"], "--ops: unknown ['rmsnorm']"),
        (["nrom"], "invalid choice: 'nrom'"),
        (["attention", "--only", "decode,prefill"], "--only: unknown ['prefill']"),
    ],
)
def test_typos_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        cli.parse(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_known_arguments_parse() -> None:
    a = cli.parse(["quant", "--ops", "rms_norm,quantize", "--dtypes", "bf16", "--quick"])
    assert (a.what, a.ops, a.dtypes, a.quick, a.reps, a.no_compile) == (
        "quant", "rms_norm,quantize", "bf16", True, 50, False
    )  # fmt: skip
    assert cli.known_ops() >= {"silu_and_mul", "softmax", "quantize", "fused_add_rms_norm"}
    assert cli.parse(["attention", "--only", "decode,varlen"]).only == "decode,varlen"


def test_every_suite_has_a_runner_and_dtypes() -> None:
    import importlib

    for suite, module in cli.MODULES.items():
        mod = importlib.import_module(f"aotkernels.bench.{module}")
        runner = "run" if module != "frontends" else f"run_{suite}"
        assert callable(getattr(mod, runner)), suite
        assert suite in ("launch", "jax") or suite in cli.SUITE_DTYPES


def test_import_aotkernels_does_not_import_bench() -> None:
    code = "import sys, aotkernels; print(sorted(m for m in sys.modules if 'bench' in m))"
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert r.stdout.strip() == "[]"


def test_main_runs_the_suites_and_writes_their_json_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dispatch on stand-in suites: ``all`` writes every suite's rows under the keys the
    JSON always had; a failed check is reported and makes the exit status 1."""
    import importlib

    class FakeTorch:
        __version__ = "0"

        class cuda:  # torch.cuda's spelling
            @staticmethod
            def get_device_name() -> str:
                return "stand-in"

    monkeypatch.setattr(cli, "cuda_torch", FakeTorch)
    ran: list[str] = []

    def rows(name: str, check: str = "ok") -> Any:
        def run(args: argparse.Namespace) -> list[dict[str, Any]]:
            ran.append(name)
            return [{"op": name, "vs_eager": 2.0, "check": check}]

        return run

    for suite, module in cli.MODULES.items():
        mod = importlib.import_module(f"aotkernels.bench.{module}")
        if suite == "attention":
            monkeypatch.setattr(mod, "run", lambda a: (rows("fwd")(a), rows("dec")(a), []))
        elif module == "frontends":
            monkeypatch.setattr(mod, f"run_{suite}", rows(suite))
        else:
            monkeypatch.setattr(
                mod, "run", rows(suite, "FAIL: 1 differs" if suite == "rope" else "ok")
            )
    path = tmp_path / "all.json"
    assert cli.main(["all", "--json", str(path)]) == 1  # rope's stand-in check failed
    assert ran == ["launch", "jax", "elementwise", "norm", "quant", "gemm", "rope", "batched",
                   "fwd", "dec"]  # fmt: skip
    out = json.loads(path.read_text())
    assert list(out) == ["device", "torch", "launch", "jax", "elementwise", "norm", "quant",
                         "gemm_method", "gemm", "rope", "batched", "attention",
                         "attention_decode", "attention_varlen"]  # fmt: skip
    assert out["gemm_method"]["rounds"] == 2 and out["attention_varlen"] == []
    assert cli.main(["backward"]) == 0 and ran[-1] == "backward"


def test_selection_helpers() -> None:
    assert common.dtypes(args(dtypes=None), ["bf16", "f32"], ["bf16"]) == ["bf16"]
    assert common.dtypes(args(dtypes="f32,int8"), ["bf16", "f32"], ["bf16"]) == ["f32"]
    names = ["rms_norm static", "rms_norm per-token", "quantize static"]
    assert common.selected(args(ops=None), names) == names
    assert common.selected(args(ops="rms_norm"), names) == names[:2]
    assert common.compiled(args(no_compile=True), torch, torch.relu) is None


# --- reference formulas against independent float64 evaluations ---------------------------------


def _erf_gelu(x: float) -> float:
    return 0.5 * x * (1 + math.erf(x / math.sqrt(2)))


def _tanh_gelu(x: float) -> float:
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


SCALAR = {"relu": lambda x: max(x, 0.0), "gelu": _erf_gelu, "gelu_tanh": _tanh_gelu,
          "silu": lambda x: x * _sigmoid(x), "sigmoid": _sigmoid}  # fmt: skip


@pytest.mark.parametrize("op", reference.ACTIVATIONS)
def test_activations_against_scalar_math(op: str) -> None:
    x = randn(37, dtype=torch.float64) * 4
    want = torch.tensor([SCALAR[op](v) for v in x.tolist()], dtype=torch.float64)
    torch.testing.assert_close(reference.activation(op, x, "float64"), want, rtol=1e-12, atol=0)
    assert reference.activation(op, x.float()).dtype == torch.float32  # the fp32 default


@pytest.mark.parametrize("op", list(reference.GATED))
def test_gated_against_scalar_math(op: str) -> None:
    x = randn(3, 10, dtype=torch.float64)
    act = SCALAR[reference.GATED[op]]
    want = torch.tensor([[act(a) * b for a, b in zip(r[:5], r[5:], strict=True)]
                         for r in x.tolist()], dtype=torch.float64)  # fmt: skip
    torch.testing.assert_close(reference.gated(op, x, "float64"), want, rtol=1e-12, atol=0)


def test_norms_against_row_loops() -> None:
    x, w, b = randn(4, 33, seed=1), randn(33, seed=2), randn(33, seed=3)
    rms, ln = [], []
    for row in x.double().tolist():
        r = 1 / math.sqrt(sum(v * v for v in row) / len(row) + 1e-6)
        rms.append([v * r * wi for v, wi in zip(row, w.double().tolist(), strict=True)])
        mu = sum(row) / len(row)
        s = 1 / math.sqrt(sum((v - mu) ** 2 for v in row) / len(row) + 1e-5)
        ln.append([(v - mu) * s * wi + bi for v, wi, bi in
                   zip(row, w.double().tolist(), b.double().tolist(), strict=True)])  # fmt: skip
    f64 = torch.float64
    torch.testing.assert_close(reference.rms_norm(x, w), torch.tensor(rms, dtype=f64))
    torch.testing.assert_close(reference.layer_norm(x, w, b), torch.tensor(ln, dtype=f64))
    torch.testing.assert_close(
        reference.rms_norm(x, w, gemma=True), reference.rms_norm(x, w + 1, dtype="float64")
    )
    F = torch.nn.functional
    torch.testing.assert_close(
        reference.layer_norm(x, w, b), F.layer_norm(x.double(), (33,), w.double(), b.double())
    )


def test_fused_add_normalizes_the_sum_rounded_to_storage() -> None:
    x, r, w = (randn(2, 64, dtype=torch.bfloat16, seed=s) for s in (4, 5, 6))
    y, s = reference.fused_add_rms_norm(x, r, w)
    assert s.dtype == torch.bfloat16
    assert torch.equal(s, (x.float() + r.float()).to(torch.bfloat16))
    torch.testing.assert_close(y, reference.rms_norm(s, w))


def test_softmax_rows_sum_to_one_and_masked_rows_are_zero() -> None:
    x = randn(3, 9)
    x[1] = float("-inf")
    x[2, :4] = float("-inf")
    y = reference.softmax(x)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y.sum(-1), torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64))
    assert torch.equal(y[1], torch.zeros(9, dtype=torch.float64))
    assert torch.equal(y[2, :4], torch.zeros(4, dtype=torch.float64))


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rot", [8, 4])
def test_rope_rotates_each_pair(neox: bool, rot: int) -> None:
    tokens, heads, hd = 5, 2, 8
    cache = reference.rope_cache(16, rot, device="cpu")
    x = randn(tokens, heads, hd, dtype=torch.float64)
    pos = torch.tensor([0, 3, 15, 7, 3])
    got = reference.rope(x, pos, cache, neox, "float64")
    want = x.clone()
    for t, p in enumerate(pos.tolist()):
        for i in range(rot // 2):
            ang = p / 10000 ** (2 * i / rot)
            a, b = (i, i + rot // 2) if neox else (2 * i, 2 * i + 1)
            c, s = math.cos(ang), math.sin(ang)
            want[t, :, a] = x[t, :, a] * c - x[t, :, b] * s
            want[t, :, b] = x[t, :, b] * c + x[t, :, a] * s
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # the cache is f32
    assert torch.equal(got[..., rot:], x[..., rot:])


@pytest.mark.parametrize("causal", [False, True])
def test_attention_against_loops(causal: bool) -> None:
    b, sq, sk, h, hkv, d = 1, 3, 5, 4, 2, 8
    q, k, v = randn(b, sq, h, d, seed=7), randn(b, sk, hkv, d, seed=8), randn(b, sk, hkv, d, seed=9)
    out, lse = reference.attention(q, k, v, causal)
    for hi in range(h):
        kv = hi // (h // hkv)
        for i in range(sq):
            keys = [j for j in range(sk) if not causal or j <= i + sk - sq]  # bottom-right
            s = [float(q[0, i, hi] @ k[0, j, kv]) / math.sqrt(d) for j in keys]
            m = max(s)
            e = [math.exp(x - m) for x in s]
            want = sum(ei * v[0, j, kv].double() for ei, j in zip(e, keys, strict=True)) / sum(e)
            torch.testing.assert_close(out[0, i, hi].double(), want, rtol=1e-5, atol=1e-6)
            assert lse[0, hi, i].item() == pytest.approx(m + math.log(sum(e)), rel=1e-5)


def test_fp8_dynamic_scale() -> None:
    y = torch.tensor([[1.0, -896.0], [0.0, 0.0]], dtype=torch.float64)
    s = reference.fp8_dynamic_scale(y, "float8_e4m3fn")
    assert s.flatten().tolist() == [2.0, reference.MIN_AMAX / 448.0]
    assert reference.fp8_dynamic_scale(y, "float8_e5m2", None).item() == 896.0 / 57344.0


# --- the checks ---------------------------------------------------------------------------------


def test_close_accepts_within_tolerance_and_names_the_worst_element() -> None:
    want = randn(4, 6, dtype=torch.float64)
    got = want.to(torch.bfloat16)  # one rounding: within bf16's tolerance
    assert reference.close(got, want, "elementwise") == ""
    got[2, 3] += 1.0
    why = reference.close(got, want, "elementwise")
    assert why.startswith("1 of 24 elements beyond rtol 0.008 atol 1e-06, e.g. at (2, 3)")
    nan = torch.full((2,), float("nan"))
    assert reference.close(nan, nan.double(), "norm") == ""  # NaN where the reference has NaN
    assert reference.close(nan, torch.zeros(2, dtype=torch.float64), "norm").startswith("2 of 2")


def test_fp8_close_on_torch_conversion() -> None:
    y = randn(8, 128, dtype=torch.float64) * 3
    scale = torch.tensor([6.0 / 448.0])
    q = (y / scale.double()).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert reference.fp8_close(q, scale, y, "float8_e4m3fn", 0.0) == ""
    bad = q.clone()
    bad[0, 0] = torch.tensor(-float(q[0, 0].float()) * 2 - 1).to(torch.float8_e4m3fn)
    assert reference.fp8_close(bad, scale, y, "float8_e4m3fn", 0.0).startswith("1 of 1024")


def test_check_reports_failures_and_exceptions() -> None:
    assert common.check(lambda: "") == "ok"
    assert common.check(lambda a: a, "3 differ") == "FAIL: 3 differ"
    assert common.check(lambda: 1 / 0) == "FAIL: ZeroDivisionError: division by zero"
    results = {"device": "x", "norm": [{"check": "ok"}, {"check": "FAIL: 3 differ"}],
               "attention": [{"check": None}], "gemm_method": {"rounds": 2}}  # fmt: skip
    assert common.failed_checks(results) == ["norm: {'check': 'FAIL: 3 differ'}"]


@pytest.mark.parametrize("op", list(elementwise.cases(torch)))
def test_elementwise_check_on_torch(op: str) -> None:
    case = elementwise.cases(torch)[op]
    x = randn(4, 64, dtype=torch.bfloat16)
    assert elementwise.compare(case.eager, op, x) == ""  # torch in bf16 rounds once per op
    assert elementwise.compare(lambda t: case.eager(t) + 0.5, op, x) != ""


@pytest.mark.parametrize("op", list(norm.cases(torch)))
def test_norm_check_on_torch(op: str) -> None:
    case = norm.cases(torch)[op]
    x, r, w, b = (randn(*s, seed=i) for i, s in enumerate([(3, 256), (3, 256), (256,), (256,)]))
    # torch's f32 formula as ours: within the f32 tolerance of the fp64 reference
    assert norm.compare(case._replace(ours=case.eager), x, r, w, b) == ""

    def off_by_one(x: Any, r: Any, w: Any, b: Any) -> Any:  # x[:, 0] read as 1 more
        return case.eager(x + torch.nn.functional.one_hot(torch.tensor(0), x.shape[-1]), r, w, b)

    wrong = case._replace(ours=off_by_one)
    assert norm.compare(wrong, x, r, w, b) != ""


@pytest.mark.parametrize("op", list(quant.cases(torch)))
def test_quant_check_on_torch(op: str) -> None:
    case = quant.cases(torch)[op]
    x, r = randn(2, 256, seed=1), randn(2, 256, seed=2)
    w, b = torch.rand(256, generator=torch.Generator().manual_seed(3)) + 0.5, randn(256, seed=4)
    s = torch.full((1,), 6.0 / 448.0)

    def as_ours(seq: Any) -> Any:  # ours returns (q, ..., scale): the sequence's q, its scale
        def ours(x: Any, r: Any, w: Any, b: Any, s: Any) -> Any:
            res = seq(x, r, w, b, s)
            return (res[0] if isinstance(res, tuple) else res, s) if "static" in op else res

        return ours

    assert quant.compare(case._replace(ours=as_ours(case.seq)), x, r, w, b, s) == ""
    one_more = torch.nn.functional.one_hot(torch.tensor(0), 256)  # x[:, 0] read as 1 more
    wrong = as_ours(lambda x, *rest: case.seq(x + one_more, *rest))
    assert quant.compare(case._replace(ours=wrong), x, r, w, b, s) != ""
    assert case.moved(16384, 4096, 2) > 16384 * 4096 * 2


@pytest.mark.parametrize("neox", [True, False])
def test_rope_check_on_torch(neox: bool) -> None:
    q, k = randn(3, 4, 64, seed=1), randn(3, 2, 64, seed=2)
    pos, cache = torch.tensor([0, 9, 4]), reference.rope_cache(10, 32, device="cpu")

    def ours(q: Any, k: Any, pos: Any, cache: Any, is_neox: bool) -> tuple[Any, Any]:
        return rope.formula(neox)(q, k, pos, cache)  # the layout of the test, whatever asked

    assert rope.compare(ours, neox, q, k, pos, cache) == ""
    assert rope.compare(ours, not neox, q, k, pos, cache) != ""


def test_attention_checks_on_sdpa() -> None:
    F = torch.nn.functional
    q, k, v = (randn(2, 7, 4, 16, dtype=torch.bfloat16, seed=s) for s in (1, 2, 3))

    def sdpa(causal: bool) -> Any:
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        return lambda i: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(
            1, 2
        )

    assert attention.compare(sdpa(True), q, k, v, True) == ""
    assert attention.compare(sdpa(False), q, k, v, True) != ""
    lens = [3, 0, 5]
    cu = [0, 3, 3, 8]
    pq, pk, pv = (randn(8, 4, 16, dtype=torch.bfloat16, seed=s) for s in (4, 5, 6))

    def packed(i: int) -> Any:
        parts = [reference.attention(pq[None, s:e], pk[None, s:e], pv[None, s:e], True)[0][0]
                 for s, e in itertools.pairwise(cu)]  # fmt: skip
        return torch.cat(parts).to(torch.bfloat16)

    assert sum(lens) == cu[-1]
    assert attention.compare_varlen(packed, pq, pk, pv, cu, True) == ""
    why = attention.compare_varlen(packed, pq, pk, pv, cu, False)
    assert why.startswith("sequence 0: ") and "; sequence 2: " in why and "sequence 1" not in why


@pytest.mark.parametrize("op", ["rms_norm", "silu_and_mul", "softmax"])
def test_backward_gradient_error_on_torch(op: str) -> None:
    case = frontends.backward_cases(torch)[op]
    x, w = randn(4, 64, dtype=torch.bfloat16, seed=1), randn(64, dtype=torch.bfloat16, seed=2)
    dy = randn(*case.theirs(x, w).shape, dtype=torch.bfloat16, seed=3)
    wrt = 2 if op == "rms_norm" else 1
    # torch's bf16 autograd as ours: a few bf16 roundings away from the fp64 gradients
    assert frontends.grad_error(case._replace(ours=case.theirs), x, w, dy, wrt) < 2e-2
    doubled = case._replace(ours=lambda x, w: 2 * case.theirs(x, w))
    assert frontends.grad_error(doubled, x, w, dy, wrt) == pytest.approx(1.0, rel=2e-2)


# --- shapes, rows and reports --------------------------------------------------------------------


def test_gemm_shape_lists_and_goals() -> None:
    full = gemm.shapes(["square", "llm"], quick=False)
    assert len(full) == len(gemm.SQUARE) + len(gemm.LLM_M) * len(gemm.LLM_NK)
    quick = gemm.shapes(["llm"], quick=True)
    assert [(s.m, s.n, s.k) for s in quick] == [(16, 4096, 4096), (1024, 4096, 4096),
                                               (16, 14336, 4096), (1024, 14336, 4096)]  # fmt: skip
    sq4k, sq1k, llm = gemm.GemmShape("square", 4096, 4096, 4096), full[0], quick[0]
    assert (gemm.goal("int8", llm), gemm.goal("fp8", llm), gemm.goal("bf16", sq4k)) == (1, 1, 1)
    assert (gemm.goal("bf16", sq1k), gemm.goal("f16", llm)) == (0.9, 0.95)
    assert gemm.fp8_scale_modes(sq4k, True) == ("tensor", "rowcol", "block")
    assert gemm.fp8_scale_modes(quick[1], True) == ("tensor",)
    assert gemm.fp8_scale_modes(quick[1], False) == ("tensor", "rowcol", "block")
    assert sq4k.flops == 2 * 4096**3
    assert gemm.method(args(reps=7))["reps_per_round"] == 7


def test_input_sets_and_rotation() -> None:
    assert timing.input_sets(1 << 30) == 1
    assert timing.input_sets(1 << 20) == 16
    assert timing.input_sets(8 << 20, most=64) == 32
    calls = [timing.rotate(lambda a, b: (a, b), [1, 2, 3], ["x"])(i) for i in range(4)]
    assert calls == [(1, "x"), (2, "x"), (3, "x"), (1, "x")]


def test_host_us_counts_microseconds_per_call() -> None:
    waited: list[Any] = []
    us = timing.host_us(lambda: 7, calls=50, rounds=3, warmup=2, wait=waited.append)
    assert 0 < us < 1e4
    assert waited == [7] * 4  # after the warm-up and after each round


def test_bandwidth_row() -> None:
    row = common.bandwidth(4e12, 4.0, {"ours": 500.0, "eager": 1000.0, "compile": None})
    assert row == {"ours_TBps": 8.0, "eager_TBps": 4.0, "compile_TBps": None, "copy_TBps": 4.0,
                   "vs_eager": 2.0, "vs_compile": None, "of_copy": 2.0}  # fmt: skip


def test_report_cells_geomean_table_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert [report.cell(v) for v in (None, 0.0, 1.23456, 0.00123, "x", 3)] == [
        "", "0.000", "1.235", "1.23e-03", "x", "3"
    ]  # fmt: skip
    assert report.geomean([2.0, 8.0, None]) == pytest.approx(4.0)
    assert report.geomean([None]) is None
    rows = [{"op": "silu", "vs_eager": 2.0, "ratio": 1.0, "check": "ok"},
            {"op": "relu", "vs_eager": 8.0, "ratio": 4.0, "check": "ok"}]  # fmt: skip
    report.table(rows, "title")
    out = capsys.readouterr().out
    assert "geomean: vs_eager 4.000, ratio 2.000" in out and "silu" in out and "relu" in out
    path = tmp_path / "bench.json"
    report.write_json({"device": "d", "norm": rows}, str(path))
    assert json.loads(path.read_text()) == {"device": "d", "norm": rows}
    assert report.gemm_chart_path("out/c.png", "gemm") == "out/c.png"
    assert report.gemm_chart_path("out/c.png", "all") == "out/c-gemm.png"
    assert report.gemm_chart_path("out/c", "all") == "out/c-gemm.png"


# --- GPU: our kernels pass the benchmarks' checks ------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_suites_checks_pass_on_our_kernels(dtype: str) -> None:
    import aotkernels as ak

    dt = getattr(torch, dtype)
    x, r = (torch.randn(7, 1024, device="cuda", dtype=dt) for _ in range(2))
    w = torch.rand(1024, device="cuda", dtype=dt) + 0.5
    b = torch.randn(1024, device="cuda", dtype=dt)
    for op, case in elementwise.cases(torch).items():
        assert elementwise.compare(case.ours, op, x) == "", op
    for op, ncase in norm.cases(torch).items():
        assert norm.compare(ncase, x, r, w, b) == "", op
    s = torch.full((1,), 6.0 / 448.0, device="cuda")
    for op, qcase in quant.cases(torch).items():
        assert quant.compare(qcase, x, r, w, b, s) == "", op
    q, k = (
        torch.randn(5, 4, 128, device="cuda", dtype=dt),
        torch.randn(5, 2, 128, device="cuda", dtype=dt),
    )
    pos, cache = torch.tensor([0, 1, 7, 3, 9], device="cuda"), reference.rope_cache(10, 64)
    for neox in (True, False):
        assert rope.compare(ak.rope, neox, q, k, pos, cache) == ""
    for op, bcase in frontends.backward_cases(torch).items():
        dy = torch.randn_like(bcase.ours(x, w))
        assert frontends.grad_error(bcase, x, w, dy, 2 if op == "rms_norm" else 1) < 2e-2, op
    if dtype != "float32":
        qa, ka, va = (torch.randn(2, 100, 8, 64, device="cuda", dtype=dt) for _ in range(3))
        assert (
            attention.compare(lambda i: ak.attention(qa, ka, va, causal=True), qa, ka, va, True)
            == ""
        )


def test_charts_write_a_png_or_say_why_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    norm_rows = [{"op": "rms_norm", "dtype": "bf16", "shape": [1, 4096], "vs_best_torch": 1.5}]
    gemm_rows = [{"dtype": "bf16", "M": 16, "N": 4096, "K": 4096, "b": "kmajor", "scales": None,
                  "ratio": 1.1, "goal": 0.9, "meets": True, "anchor": "torch.matmul"}]  # fmt: skip
    paths = [tmp_path / "norm.png", tmp_path / "gemm.png"]
    report.speedup_chart(norm_rows, str(paths[0]), "norm")
    report.gemm_chart(gemm_rows, str(paths[1]), "gemm")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert capsys.readouterr().err.count("no matplotlib, no chart") == 2
        assert not any(p.exists() for p in paths)
    else:
        assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)
