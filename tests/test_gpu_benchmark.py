"""benchmarks/gpu.py: without CUDA it prints its plan and trains nothing; its helpers (the loss
comparison, the peak table, the figures read from scalars.jsonl) hold; the --tiny smoke run
(slow: its runs are processes) takes the real code path on this CPU. The benchmark itself runs in
this process (run_tool)."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "gpu.py"
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")


@pytest.fixture(scope="module")
def gpu(load_script):
    yield load_script(BENCH, "libai_gpu_benchmark")
    del sys.modules["libai_gpu_benchmark"]


@no_cuda
def test_cpu_command_prints_the_plan_and_writes_it(gpu, run_tool, tmp_path):
    out = tmp_path / "plan.json"
    proc = run_tool(BENCH, "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "nothing is measured and nothing is trained" in proc.stdout
    for name in gpu.PASSES:
        assert f"  {name} " in proc.stdout, name
    assert "python tools/train.py configs/bert_tiny.py" in proc.stdout
    assert "python tools/train.py configs/bert_large.py" in proc.stdout
    assert "--graph" in proc.stdout
    # FSDP2 on one GPU through the public config, no private entry point (issue 37)
    assert "+parallel.fsdp=1 +parallel.one_process_fsdp=True" in proc.stdout
    assert "+parallel.fsdp=1 +parallel.cpu_offload=True" in proc.stdout
    assert "fsdp1" not in proc.stdout and "gpu_probes.py matmul --n 8192" in proc.stdout
    assert "gpu_probes.py transformers --micro 32 --accum 8 --seq 512" in proc.stdout
    report = json.loads(out.read_text())
    assert report["measured"] is False and "passes" not in report
    assert [p["name"] for p in report["plan"]] == list(gpu.PASSES)
    large = report["plan"][gpu.PASSES.index("bert-large")]["commands"][0]
    for option in ("train_dataloader.dataset.max_seq_length=512", "+optim_wrapper.dtype=bfloat16",
                   "+device=cuda", "train_dataloader.batch_size=8"):
        assert option in large


@pytest.mark.parametrize("flags, cuda", [([], False), (["--dry-run"], True),
                                         (["--device", "cpu"], True)])
def test_without_a_gpu_or_with_dry_run_nothing_trains(gpu, tmp_path, monkeypatch, capsys,
                                                     flags, cuda):
    def no_training(*args, **kwargs):
        raise AssertionError("the dry plan started a run")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(gpu, "execute", no_training)
    monkeypatch.setattr(gpu.subprocess, "Popen", no_training)
    monkeypatch.setattr(gpu.tempfile, "gettempdir", lambda: str(tmp_path))  # --out's default
    assert gpu.main(flags) == 0
    printed = capsys.readouterr().out
    assert "nothing is measured" in printed and all(f"  {n} " in printed for n in gpu.PASSES)
    assert json.loads((tmp_path / "libai_gpu.json").read_text())["measured"] is False
    assert [p.name for p in tmp_path.iterdir()] == ["libai_gpu.json"]  # no work dir either


@pytest.mark.parametrize("flags", [[], ["--tiny", "--device", "cpu", "--compile-backend",
                                        "aot_eager", "--peak-tflops", "100"]])
def test_every_run_is_a_valid_config(gpu, flags):
    from libai.config import Config

    args = gpu.parse_args(flags)
    args.device = args.device or "cuda"
    plan = gpu.build_plan(args)
    assert [p.name for p in plan.passes] == list(gpu.PASSES)
    assert {r for p in plan.passes for r in p.runs} == set(plan.runs)
    for run in plan.runs.values():
        if run.entry in ("matmul", "transformers"):  # probes: no config
            continue
        cfg = Config.fromfile(str(ROOT / run.config))
        cfg.merge_from_options(list(run.options))  # a mistyped key fails here
    runs = plan.runs
    assert runs["large_graph"].graph and "--graph" in runs["large_graph"].argv("W")
    assert runs["small_graph_fp32"].graph and not runs["small_fp32"].graph
    # the public config path (tools/train.py), no private entry point
    assert runs["large_fsdp"].entry == runs["large_fsdp_offload"].entry == "train"
    assert "+parallel.one_process_fsdp=True" in runs["large_fsdp"].options
    assert "+parallel.cpu_offload=True" in runs["large_fsdp_offload"].options
    for m in (8, 16, 32, 64):  # the micro-batch sweep keeps the global batch
        suffix = "" if m == 8 else f"_{m}"
        options = runs[f"large_eager{suffix}"].options
        micro = int(next(o for o in options if o.startswith("train_dataloader.batch_size="))
                    .split("=")[1])
        accum = int(next(o for o in options if o.startswith("optim_wrapper.accumulative_counts"))
                    .split("=")[1])
        assert micro * accum == (256 if not args.tiny else max(4, micro)), m
    assert "+optim_wrapper.dtype=bfloat16" in runs["small_bf16"].options
    assert not any("dtype" in o for o in runs["small_fp32"].options)


def test_only_selects_passes_and_their_runs(gpu):
    plan = gpu.build_plan(gpu.parse_args(["--only", "check-graph", "--device", "cuda"]))
    assert [p.name for p in plan.passes] == ["check-graph"]
    assert set(plan.runs) == {"small_graph_fp32", "small_fp32"}
    with pytest.raises(SystemExit):
        gpu.parse_args(["--iters", "40", "--accum", "32"])  # no steady interval left


def test_compare_losses(gpu):
    want = {1: 10.0, 2: 9.0, 3: 8.0}
    same = gpu.compare_losses(dict(want), want, 1e-3)
    assert same["ok"] and same["worst_rel_diff"] == 0.0
    off = gpu.compare_losses({1: 10.0, 2: 9.0 * 1.02, 3: 8.0 * 1.001}, want, 1e-2)
    assert not off["ok"] and off["at_step"] == 2 and off["worst_rel_diff"] == pytest.approx(0.02)
    assert gpu.compare_losses({1: 10.0, 2: 9.0 * 1.02, 3: 8.0}, want, 3e-2)["ok"]
    short = gpu.compare_losses({1: 10.0, 2: 9.0}, want, 1e-2)
    assert not short["ok"] and short["missing_steps"] == [3]
    nan = gpu.compare_losses({1: 10.0, 2: math.nan, 3: 8.0}, want, 1e-2)
    assert not nan["ok"] and nan["at_step"] == 2 and nan["worst_rel_diff"] == math.inf
    assert not gpu.compare_losses({}, {}, 1e-2)["ok"]


def test_peak_tflops_table_and_override(gpu):
    assert gpu.peak_tflops("NVIDIA H100 80GB HBM3", None) == (989.0, "PEAK_TFLOPS table")
    assert gpu.peak_tflops("NVIDIA H100 PCIe", None)[0] == 756.0
    assert gpu.peak_tflops("NVIDIA A100-SXM4-80GB", None)[0] == 312.0
    assert gpu.peak_tflops("NVIDIA H100 80GB HBM3", 900) == (900.0, "--peak-tflops")
    peak, why = gpu.peak_tflops("Some Future GPU", None)
    assert peak is None and "--peak-tflops" in why
    assert gpu.peak_tflops(None, None) == (None, "no GPU")


def _row(step, tokens, tflops=None, memory=None, loss=9.0):
    row = {"step": step, "train/loss": loss, "train/tokens_per_s": tokens, "train/time": 0.02,
           "train/data_time": 0.001}
    if tflops is not None:
        row["train/tflops"] = tflops
    if memory is not None:
        row["train/memory"] = memory
    return row


def test_figure_summary_skips_the_first_interval(gpu):
    rows = [_row(32, 1000.0, 10.0, 9000.0), _row(64, 200_000.0, 420.0, 8000.0),
            _row(96, 190_000.0, 400.0, 8000.0), _row(128, 210_000.0, 440.0, 8100.0)]
    fig = gpu.figure_summary(rows, peak=989.0, target=400.0)
    assert fig["steady_intervals"] == 3 and fig["tokens_per_s"] == 200_000.0
    assert fig["tflops"] == 420.0 and fig["tflops_source"] == "ThroughputHook"
    assert fig["mfu"] == pytest.approx(420.0 / 989.0) and fig["meets_target"] is True
    assert fig["peak_memory_mib"] == 9000.0  # the whole run's peak, warm-up included
    assert fig["iteration_ms"] == pytest.approx(20.0)
    assert gpu.figure_summary(rows, peak=None, target=500.0)["meets_target"] is False
    assert gpu.figure_summary(rows, peak=None, target=None)["mfu"] is None


def test_graph_figure_uses_the_eager_flops_per_token(gpu):
    eager = [_row(32, 1000.0, 1.0), _row(64, 100_000.0, 100.0)]
    per_token = gpu.flops_per_token(eager)
    assert per_token == pytest.approx(1e9)
    graph = [_row(32, 10.0), _row(64, 150_000.0)]  # the hook logs no TFLOP/s in graph mode
    fig = gpu.figure_summary(graph, peak=1000.0, target=400.0, flops_token=per_token)
    assert fig["tflops"] == pytest.approx(150.0) and fig["mfu"] == pytest.approx(0.15)
    assert fig["tflops_source"].startswith("eager FLOPs/token")
    assert gpu.figure_summary(graph, 1000.0, 400.0)["tflops"] is None
    assert gpu.flops_per_token([_row(1, 5.0)]) is None


def test_read_scalars_takes_the_newest_run_and_training_rows(gpu, tmp_path):
    for stamp, loss in (("20260101_000000", 1.0), ("20260102_000000", 2.0)):
        (tmp_path / stamp).mkdir()
        (tmp_path / stamp / "scalars.jsonl").write_text(
            json.dumps({"step": 1, "train/loss": loss}) + "\n"
            + json.dumps({"step": 1, "val/accuracy": 0.5}) + "\n")
    assert gpu.read_scalars(str(tmp_path)) == [{"step": 1, "train/loss": 2.0}]
    assert gpu.read_scalars(str(tmp_path / "missing")) == []


def test_sdpa_kernel_names(gpu):
    assert gpu.sdpa_kernel(["aten::_scaled_dot_product_efficient_attention",
                            "aten::_scaled_dot_product_efficient_attention_backward"]) \
        == "memory-efficient"
    assert gpu.sdpa_kernel(["aten::_scaled_dot_product_flash_attention"]) == "flash"
    assert gpu.sdpa_kernel(["aten::_scaled_dot_product_flash_attention_for_cpu"]) == "flash (CPU)"
    assert gpu.sdpa_kernel(["aten::_scaled_dot_product_cudnn_attention"]) == "cudnn"
    assert gpu.sdpa_kernel(["aten::_scaled_dot_product_attention_math"]) == "math"
    assert gpu.sdpa_kernel([]) == "none found"


def test_no_private_import_and_no_runner_subclass():
    text = BENCH.read_text() + (ROOT / "benchmarks" / "gpu_probes.py").read_text()
    assert "_fully_shard" not in text and "(Runner)" not in text
    assert "from libai.parallel.apply" not in text


def test_markdown_table_of_a_report(gpu):
    report = dict(device="NVIDIA H200", torch="2.11.0", date="2026-11-29", commit="abc1234",
                  settings=dict(tiny=False), peak_tflops=989.0, passes=[
                      dict(name="matmul", kind="probe", what="bf16 8192^3", tflops=805.0),
                      dict(name="bert-large", kind="figure", what="eager", micro=8, status="ok",
                           tokens_per_s=72134.0, tflops=146.0, mfu=146 / 989,
                           of_matmul=146 / 805, peak_memory_mib=10.1 * 1024),
                      dict(name="transformers", kind="peer", what="HF", micro=8, status="ok",
                           tokens_per_s=56534.0, tflops=None, mfu=None, of_matmul=None,
                           peak_memory_mib=11.4 * 1024),
                      dict(name="bert-large-64", kind="figure", what="eager 64", micro=64,
                           status="skipped", error="large_eager_64: the --budget of 480 s was "
                           "spent")])
    table = gpu.markdown_table(report)
    assert "on NVIDIA H200, torch 2.11.0, 2026-11-29, commit abc1234" in table
    assert "| matmul | bf16 8192^3 | | 805 | 81% | 100% |" in table
    assert "| bert-large | eager | 72,134 | 146 | 14.8% | 18.1% | 10.1 | 1.28 | ok |" in table
    assert "| bert-large-64 | eager 64 | - |" in table and "skipped: large_eager_64: the" in table


def test_tiny_smoke_run_on_cpu(run_tool, run_process, tmp_path):
    """The measured path on tiny shapes: tools/train.py runs (eager, FSDP2 on a one-process mesh
    through the public config), the matmul probe and the transformers peer (processes the
    benchmark starts: run_process marks the test slow), read through their scalars.jsonl and
    compared step by step."""
    pytest.importorskip("transformers")
    out = tmp_path / "tiny.json"
    proc = run_tool(BENCH, "--tiny", "--device", "cpu", "--only", "matmul", "bert-large",
                    "transformers", "bert-large-fsdp", "--out", out, "--keep", tmp_path / "work")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["measured"] is True
    matmul, eager, peer, fsdp = report["passes"]
    assert matmul["status"] == "ok" and matmul["tflops"] > 0
    for fig in (eager, fsdp):
        assert fig["status"] == "ok" and fig["tokens_per_s"] > 0 and fig["tflops"] > 0
        assert fig["tflops_source"] == "ThroughputHook" and fig["steady_intervals"] == 1
        assert fig["meets_target"] is None  # tiny shapes have no target
        assert fig["of_matmul"] == pytest.approx(fig["tflops"] / matmul["tflops"])
    assert peer["status"] == "ok" and peer["tokens_per_s"] > 0 and peer["probe"]["loss"] > 0
    # the same model, data and dropout draws: FSDP2's bf16 parameters round differently
    vs = fsdp["loss_vs_eager"]
    assert vs["ok"] and vs["steps"] == 2 and vs["worst_rel_diff"] <= vs["rtol"]
    log = Path(report["runs"]["large_fsdp"]["output"]).read_text()
    assert "FSDP2" in log and "one_process_fsdp" in report["runs"]["large_fsdp"]["command"]
    table = Path(out.with_suffix(".md")).read_text()
    assert "| bert-large | BERT-large eager" in table and "| transformers |" in table
