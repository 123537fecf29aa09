"""The scripts in bench/: they run from anywhere on the installed package, write JSON, keep --check honest, and
the docs' tables are the committed JSON rendered."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
from outside_checkout import REPO, assert_installed_package_used, copy_scripts, run_script

BENCH = REPO / "bench"
# The scripts that write a report through bench/_common.py, and those of them with targets.
REPORTING = {"bench_actor.py": True, "bench_engine.py": False, "bench_llama_cpp_python.py": False}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(copied bench folder beside a decoy spec_actor, a working directory outside any checkout)."""
    return copy_scripts(tmp_path_factory.mktemp("checkout"), "bench"), tmp_path_factory.mktemp("elsewhere")


@pytest.mark.parametrize(("script", "targets"), REPORTING.items())
def test_reporting_scripts_take_json_and_check_where_they_have_targets(bench, script, targets):
    folder, cwd = bench
    done = run_script(folder / script, "--help", cwd=cwd)  # every script's --help: tests/test_scripts_help.py
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--json PATH" in done.stdout
    assert ("--check" in done.stdout) == targets


def test_bench_actor_tiny_run_writes_its_report_and_check_follows_the_targets(bench, tmp_path):
    folder, cwd = bench
    out = tmp_path / "actor.json"
    args = ("--reps", "1", "--tokens", "4", "--measures", "stats", "--json", str(out), "--check")
    done = run_script(folder / "bench_actor.py", *args, cwd=cwd)
    assert_installed_package_used(done, "bench_actor.py")
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["schema"] == "spec_actor.bench-report/1" and report["bench"] == "bench_actor"
    assert report["source"] == "measured"
    assert report["command"] == "python bench/bench_actor.py " + " ".join(args)
    assert report["settings"] == {"reps": 1, "tokens": 4, "threads": None, "measures": ["stats"]}
    rows = report["results"]["rows"]
    assert [r["measure"] for r in rows] == [
        "actor.stats() cost, unchanged counters, cached snapshot, median (us)",
        "actor.stats() cost, changed counters, fresh native read, median (us)"]
    targets = report["targets"]
    assert [(t["name"], t["op"], t["bound"], t["unit"]) for t in targets] == [
        (r["measure"], "<=", 5, " us") for r in rows]
    for t, r in zip(targets, rows):  # each verdict, recomputed from the recorded value and bound
        assert t["value"] == pytest.approx(float(r["actor"]), abs=0.005)
        assert t["met"] == r["met"] == (t["value"] <= 5)
    assert done.returncode == (0 if all(t["met"] for t in targets) else 1)
    for r in rows:  # the table on stdout shows every row
        assert r["measure"] in done.stdout


def test_verify_cost_times_every_sequence_in_one_decode(bench, tmp_path):
    """--sequences K: verify-cost (native) reports K * (n + 1) tokens in each timed decode."""
    folder, cwd = bench
    out = tmp_path / "cost.json"
    args = ("--sequences", "3", "--max-draft", "2", "--reps", "1", "--past", "4", "--json", str(out))
    done = run_script(folder / "bench_verify_cost.py", *args, cwd=cwd)
    assert_installed_package_used(done, "bench_verify_cost.py")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["settings"]["sequences"] == 3
    rows = report["results"]["rows"]
    assert [(r["draft"], r["batch"]) for r in rows] == [(0, 3), (1, 6), (2, 9)]
    plain = rows[0]["median_us"]
    assert plain > 0
    for r in rows:  # the ceiling against plain batched decoding, recomputed from the recorded times
        assert r["ceiling"] == pytest.approx((r["draft"] + 1) * plain / r["median_us"])
    assert "plain batched decoding of 3 sequences" in done.stdout


def test_committed_docs_match_the_committed_reports(tmp_path):
    done = run_script(BENCH / "render_docs.py", "--check", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


ENGINE_REPORT = {
    "schema": "spec_actor.bench-report/1", "bench": "bench_engine",
    "command": "python bench/bench_engine.py --repeats 2 --json /tmp/e.json", "load_average_after": 1.25,
    "source": "measured", "spec_actor_version": "0.1.0", "time": "2026-01-02T03:04:05+0000",
    "machine": {"cpu": "Test CPU", "cpu_count": 4, "cpus_usable": 2, "system": "Linux", "python": "3.12",
                "load_average": 0.5},
    "settings": {}, "targets": [],
    "results": {"samples": None, "median": {
        "spec_actor plain": 40.0, "llama-completion": 50.0, "spec_actor ngram-mod": 80.0,
        "llama-speculative-simple ngram-mod": 60.0, "spec_actor ngram-cache": 100.0,
        "llama-speculative-simple ngram-cache": 20.0}},
}
ENGINE_TABLE = """\
| run | tokens/s | vs plain |
|---|---:|---:|
| spec_actor, plain | 40.0 | 1.00x |
| llama.cpp `llama-completion`, plain | 50.0 | 1.25x |
| spec_actor, ngram-mod | 80.0 | 2.00x |
| llama.cpp `llama-speculative-simple`, ngram-mod | 60.0 | 1.50x |
| spec_actor, ngram-cache | 100.0 | 2.50x |
| llama.cpp `llama-speculative-simple`, ngram-cache | 20.0 | 0.50x |

<sub>Data: [`bench/results/bench_engine.json`](../bench/results/bench_engine.json), from \
`python bench/bench_engine.py --repeats 2` on 2026-01-02, Test CPU, 4 CPUs (2 usable), load average 0.50 before, \
1.25 after.</sub>
"""


def test_render_docs_rewrites_only_the_marked_region(bench, tmp_path):
    folder, cwd = bench
    checkout = tmp_path / "checkout"
    copy = Path(shutil.copytree(folder, checkout / "bench"))
    (checkout / "native").symlink_to(REPO / "native")
    shutil.rmtree(copy / "results")
    (copy / "results").mkdir()
    (copy / "results" / "bench_engine.json").write_text(json.dumps(ENGINE_REPORT))
    (checkout / "README.md").write_text("# x\n")
    (checkout / "docs").mkdir()
    doc = checkout / "docs" / "benchmarks.md"
    before, after = "Intro.\n\n<!-- bench:bench_engine -->\n", "<!-- /bench:bench_engine -->\n\nOutro.\n"
    doc.write_text(before + "| stale | table |\n" + after)

    stale = run_script(copy / "render_docs.py", "--check", cwd=cwd)
    assert stale.returncode == 1 and "docs/benchmarks.md" in stale.stderr
    assert doc.read_text() == before + "| stale | table |\n" + after  # --check writes nothing
    done = run_script(copy / "render_docs.py", cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert doc.read_text() == before + ENGINE_TABLE + after
    assert (checkout / "README.md").read_text() == "# x\n"
    assert run_script(copy / "render_docs.py", "--check", cwd=cwd).returncode == 0


def test_render_docs_names_a_region_without_a_report(bench, tmp_path):
    folder, cwd = bench
    checkout = tmp_path / "checkout"
    copy = Path(shutil.copytree(folder, checkout / "bench"))
    (checkout / "docs").mkdir()
    (checkout / "README.md").write_text("<!-- bench:nothing -->\n<!-- /bench:nothing -->\n")
    done = run_script(copy / "render_docs.py", "--check", cwd=cwd)
    assert done.returncode != 0
    assert "README.md: region bench:nothing has no bench/results/nothing.json" in done.stderr


def test_rerun_command_points_the_json_at_the_report(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import render_docs

    out = Path("/r/x.json")
    py = render_docs.sys.executable
    assert render_docs.rerun_argv("python bench/bench_actor.py --reps 7 --json /tmp/a.json --check", out) == [
        py, "bench/bench_actor.py", "--reps", "7", "--check", "--json", "/r/x.json"]
    assert render_docs.rerun_argv("spec-actor bench --types none,ngram-mod --json=o.json --markdown", out) == [
        py, "-m", "spec_actor.cli", "bench", "--types", "none,ngram-mod", "--markdown", "--json", "/r/x.json"]
    with pytest.raises(SystemExit, match="must start with 'python' or 'spec-actor'"):
        render_docs.rerun_argv("bash run.sh", out)


# -- bench/_common.py: targets and --check ---------------------------------------------------


@pytest.fixture
def common(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import _common

    return _common


def test_target_verdicts(common):
    assert common.Target("a", 0.98, ">=", 0.98, "x").met
    assert not common.Target("a", 0.979, ">=", 0.98, "x").met
    assert common.Target("b", 50.0, "<=", 50, " ms").met
    assert not common.Target("b", 50.1, "<=", 50, " ms").met
    assert common.Target("b", 50.1, "<=", 50, " ms").describe() == "<= 50 ms"
    with pytest.raises(ValueError, match="'>=' or '<='"):
        common.Target("c", 1.0, "<", 2.0)


@pytest.mark.parametrize(("check", "values", "status"), [
    (True, (1.0, 2.0), 0), (True, (1.0, 0.5), 1), (False, (1.0, 0.5), 0)])
def test_finish_exits_1_only_under_check_with_a_missed_target(common, tmp_path, capsys, check, values, status):
    report = common.Report("bench_x", {"n": 1})
    for i, value in enumerate(values):
        report.add_target(common.Target(f"t{i}", value, ">=", 1.0, "x"))
    path = tmp_path / "r.json"
    assert report.finish(argparse.Namespace(json=str(path), check=check), {"rows": [1, 2]}) == status
    data = json.loads(path.read_text())
    assert data["bench"] == "bench_x" and data["settings"] == {"n": 1} and data["results"] == {"rows": [1, 2]}
    assert [(t["name"], t["value"], t["met"]) for t in data["targets"]] == [
        (f"t{i}", v, v >= 1.0) for i, v in enumerate(values)]
    assert {"cpu", "cpu_count", "cpus_usable", "system", "python", "load_average"} <= data["machine"].keys()
    err = capsys.readouterr().err
    assert f"{sum(v >= 1.0 for v in values)} of 2 targets met" in err
    assert ("missed: t1" in err) == (values[1] < 1.0)


def test_bench_hybrid_step_table_fixes_autos_prices_so_two_processes_choose_alike(bench, tmp_path):
    """--step-table (decision 0116): the first run writes the table each auto mode priced with, per model load;
    a second process fixed to it makes the same greedy choices, whatever its own calibration measured. Auto
    without MTP only: with MTP loaded, the model arm also prices its own measured drafting and feed times,
    which no table fixes, and a CI run saw one process draft once with MTP where the other did not."""
    folder, cwd = bench
    table = tmp_path / "tables.json"
    runs = []
    for k in range(2):
        out = tmp_path / f"hybrid-{k}.json"
        args = ("--reps", "3", "--tokens", "24", "--configs", "2 blocks", "--step-table", str(table), "--json", str(out))
        done = run_script(folder / "bench_hybrid.py", *args, cwd=cwd)
        assert_installed_package_used(done, "bench_hybrid.py")
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(out.read_text())["results"][0]["modes"])
        if k == 0:
            kept = json.loads(table.read_text())
            assert set(kept) == {"2 blocks/plain", "2 blocks/mtp"}
            assert all(len(v) == 33 and all(x > 0 for x in v) for v in kept.values())
    assert json.loads(table.read_text()) == kept  # the second run read it and wrote it back unchanged
    first, second = ({k: r["auto"][k] for k in ("steps", "drafted", "accepted", "drafters")} for r in runs)
    assert first == second
    assert all(r[mode]["same_text"] for r in runs for mode in r)


@pytest.mark.parametrize("text", ["{not json", '{"2 blocks/plain": [1.0, 2.0]}', '["a list"]'])
def test_bench_hybrid_refuses_a_step_table_it_cannot_use(bench, tmp_path, text):
    folder, cwd = bench
    table = tmp_path / "tables.json"
    table.write_text(text)
    done = run_script(folder / "bench_hybrid.py", "--reps", "3", "--configs", "2 blocks", "--step-table", str(table),
                      cwd=cwd)
    assert done.returncode != 0 and str(table) in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert table.read_text() == text  # left as it was
