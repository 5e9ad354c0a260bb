"""benches/report.py on a small hand-made run: the ratios it reports are the ones the inputs give,
the plot is written, and BENCHMARKS.md's suite section is replaced, not appended, on a rerun.
(The suite itself is a benchmark and is not run by the tests.)"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402


def write_run(d: Path) -> None:
    common = {"rows": 1000, "tokens": 90000, "threads": 2}
    lines = [
        {"bench": "flops", "cpu": "Test CPU", "vcpus": 2, "threads": 2, "ort": "1.31.1", "rows": 200, "tokens": 18000,
         "padded": 18180, "seconds": 3.0, "blas_flops": 200e9, "ort_matmul_flops": 160e9, "peak_flops": 200e9,
         "executed_flops": 130e9, "useful_flops": 128e9, "flop_per_token": 22.3e6,
         "int8": {"seconds": 1.5, "speedup": 2.0, "cosine_mean": 0.994, "cosine_min": 0.98}},
        common | {"bench": "engine", "result": {"rows": 1000, "tokens": 90000, "seconds": 10.0}},
        common | {"bench": "column", "seconds": 11.0, "left_null": 0},
        common | {"bench": "column_int8", "seconds": 6.0, "left_null": 0},
        common | {"bench": "int8_fidelity", "result": {"cosine_mean": 0.9941, "cosine_min": 0.988, "rows_below_0_99": 5,
                                                       "queries": 200, "top10_overlap_mean": 0.9, "top10_overlap_min": 0.6}},
        common | {"bench": "python", "left_null": 0, "result": {"rows": 1000, "tokens": 90000, "seconds": 12.1}},
        common | {"bench": "naive", "result": {"rows": 100, "tokens": 9000, "seconds": 4.0}},
    ]
    (d / "results.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    (d / "command.txt").write_text("bash benches/suite.sh --rows 1000\n")
    rows = ["label,provider,graph,io_binding,batch,fixed_tokens,rows,rows_per_s,tokens_per_s,padding_pct,ms_per_call,ms_median_call"]
    for b, rps in ((1, 40.0), (8, 55.0), (32, 60.0)):
        rows.append(f"debian,cpu,fp32,true,{b},,{b * 10},{rps},{rps * 90},1.0,{1000 * b / rps},{1000 * b / rps}")
    for k, rps in ((16, 400.0), (64, 120.0)):
        rows.append(f"fixed {k},cpu,fp32,true,8,{k},80,{rps},{rps * k},0.0,1,1")
    (d / "sweep.csv").write_text("\n".join(rows) + "\n")


def test_report_ratios_plot_and_idempotent_section(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_run(run)
    bench_md = tmp_path / "BENCHMARKS.md"
    bench_md.write_text("# Benchmarks\n\nintro\n\n## Older section\n\ntext\n")
    png = tmp_path / "throughput.png"
    args = [str(run), "--benchmarks", str(bench_md), "--plot", str(png)]
    assert report.main(args) == 0
    text = bench_md.read_text()
    # column 1000/11 = 90.9 rows/s against python 1000/12.1 = 82.6 rows/s: 1.10x, below 1.5x.
    assert "| tributary_embed_column ≥ 1.5x the Python pipeline (fp32, 1,000 rows) | 1.10x | no |" in text
    # engine 100 rows/s over column 90.9 rows/s: 10.0% overhead, within 15%.
    assert "| PostgreSQL overhead ≤ 15% over engine only (1,000 rows) | 10.0% | yes |" in text
    assert "| fp32 engine ≥ 50% of the machine's measured FLOP/s | 65% | yes |" in text
    assert "int8 ≥ 1.8x fp32 with mean cosine ≥ 0.99, through tributary_embed_column (1,000 rows) | 1.83x, cosine 0.9941 | yes |" in text
    assert "(first 100 rows)" in text and "## Older section" in text
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert (run / "report.md").exists()
    # A second run replaces the section.
    assert report.main(args) == 0
    again = bench_md.read_text()
    assert again.count(report.BEGIN) == 1 and again.count(report.END) == 1 and again == text
