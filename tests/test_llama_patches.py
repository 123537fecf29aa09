"""The edits spec_actor makes to llama.cpp's source: native/llama/patches/ (decisions 0085, 0086, 0088-0090, 0092-0094, 0096).

The build must apply every patch to the tree it compiles, and refuse a tree
where a hunk's lines are not exactly where the patch says rather than build
an unpatched library under the patched cache key.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "native" / "llama"))
import llama_build  # noqa: E402
import llama_patches  # noqa: E402


def _prefix() -> Path:
    return llama_build.ensure_built(llama_build.shutil.which("cmake") or "cmake", None, None)


def _built_source() -> Path:
    return Path((_prefix() / "source-dir.txt").read_text().strip())


def _touched() -> list[str]:
    """The files of llama.cpp that some patch changes."""
    return list(dict.fromkeys(fp.path for path in llama_patches.patch_files()
                              for fp in llama_patches.parse(path.read_text(), path.name)))


def _pristine_copy(dest: Path) -> Path:
    """dest holding a copy of every file the patches touch, as the pinned source has it."""
    pristine, _sha = llama_build.pristine_source(llama_build.cache_root())
    for rel in _touched():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pristine / rel, dest / rel)
    return dest


def test_the_built_tree_is_the_pinned_source_with_every_patch_applied(tmp_path):
    source = _built_source()
    tree = _pristine_copy(tmp_path)
    llama_patches.apply(tree)
    pristine, _sha = llama_build.pristine_source(llama_build.cache_root())
    assert len(_touched()) >= 10
    for rel in _touched():
        assert (tree / rel).read_bytes() == (source / rel).read_bytes() != (pristine / rel).read_bytes(), rel
    assert (source / ".patched").read_text() == llama_patches.fingerprint()


def test_git_apply_makes_the_same_files(tmp_path):
    # the patch files are ordinary patches: a developer may make and check
    # them with git (not at build time: decision 0096)
    ours = _pristine_copy(tmp_path / "ours")
    llama_patches.apply(ours)
    theirs = _pristine_copy(tmp_path / "git")
    for patch in llama_patches.patch_files():
        subprocess.run(["git", "apply", str(patch)], cwd=theirs, check=True, capture_output=True)
    for rel in _touched():
        assert (theirs / rel).read_bytes() == (ours / rel).read_bytes(), rel


def test_every_patch_says_why_and_names_its_record():
    names = [path.name for path in llama_patches.patch_files()]
    assert [name[:5] for name in names] == [f"{i:04d}-" for i in range(1, len(names) + 1)] and len(names) >= 7
    for path in llama_patches.patch_files():
        header = path.read_text().split("\n--- a/", 1)[0]
        records = re.findall(r"docs/decisions/\d{4}-[\w-]+\.md", header)
        assert len(header.splitlines()) >= 5 and (records or "issue " in header), path.name
        assert all((REPO / record).is_file() for record in records), path.name


def _patch(folder: Path, name: str, rel: str, before: str, after: str) -> None:
    folder.mkdir(exist_ok=True)
    diff = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                f"a/{rel}", f"b/{rel}", n=3)
    (folder / name).write_text("why: a test\n\n" + "".join(diff))


def _numbered(n: int, changed: dict[int, str] | None = None) -> str:
    return "".join((changed or {}).get(i, f"line {i}\n") for i in range(1, n + 1))


def test_apply_makes_each_patch_in_the_order_of_their_names(tmp_path):
    patches = tmp_path / "patches"
    _patch(patches, "0001-a.patch", "src/x.c", _numbered(20), _numbered(20, {5: "five\n", 15: "fifteen\n"}))
    # written against the tree that 0001 leaves
    _patch(patches, "0002-b.patch", "src/x.c", _numbered(20, {5: "five\n", 15: "fifteen\n"}),
           _numbered(20, {5: "five\nand a half\n", 15: "fifteen\n"}))
    (tmp_path / "tree" / "src").mkdir(parents=True)
    (tmp_path / "tree" / "src" / "x.c").write_text(_numbered(20))
    llama_patches.apply(tmp_path / "tree", patches)
    assert (tmp_path / "tree" / "src" / "x.c").read_text() == _numbered(20, {5: "five\nand a half\n",
                                                                              15: "fifteen\n"})


@pytest.mark.parametrize(("tree_text", "error"), [
    (_numbered(20, {3: "line three\n"}), r"0001-a.patch: src/x.c does not hold hunk 1's lines at line 2 "),
    ("line 0\n" + _numbered(20), r"does not hold hunk 1's lines at line 2 "),  # moved by a line: no offset
    (_numbered(20, {16: "changed\n"}), r"does not hold hunk 2's lines at line 12 "),
    (None, r"0001-a.patch: the tree has no src/x.c"),
])
def test_apply_refuses_a_tree_the_patch_was_not_written_for(tmp_path, tree_text, error):
    patches = tmp_path / "patches"
    _patch(patches, "0001-a.patch", "src/x.c", _numbered(20), _numbered(20, {5: "five\n", 15: "fifteen\n"}))
    (tmp_path / "tree" / "src").mkdir(parents=True)
    if tree_text is not None:
        (tmp_path / "tree" / "src" / "x.c").write_text(tree_text)
    with pytest.raises(SystemExit, match=error):
        llama_patches.apply(tmp_path / "tree", patches)


def test_the_fingerprint_follows_the_patch_files(tmp_path):
    folder = Path(shutil.copytree(llama_patches.PATCHES, tmp_path / "patches"))
    assert llama_patches.fingerprint(folder) == llama_patches.fingerprint()
    first = llama_patches.patch_files(folder)[0]
    first.write_bytes(first.read_bytes() + b" ")
    changed = llama_patches.fingerprint(folder)
    assert changed != llama_patches.fingerprint()
    first.rename(folder / "0000-renamed.patch")
    assert llama_patches.fingerprint(folder) not in (changed, llama_patches.fingerprint())


# Double-precision reference against ggml's flash attention. The tiled GEMM
# accumulates in F32 (errors near 1e-6 measured); the per-row path, ggml's
# own for every batch under 64 rows, accumulates V in F16 (3e-3 to 8e-3
# measured on these cases, decision 0085), so 0.03 bounds it with room. With
# 2 threads the alternating tiles caught a build whose per-row tiles wrote
# into another thread's scratch (NaN and errors of 3.3).
PER_ROW_BOUND = 0.03
TILED_BOUND = 1e-4


def _compile_check(tmp_path: Path, name: str, libs: list[str]) -> Path:
    """tests/native/<name>.cpp built against the cached llama.cpp build."""
    prefix = _prefix()
    source = _built_source()
    exe = tmp_path / name
    subprocess.run([os.environ.get("CXX", "g++"), "-O2", "-std=c++17", "-o", str(exe),
                    str(Path(__file__).parent / "native" / f"{name}.cpp"),
                    f"-I{source / 'include'}", f"-I{source / 'ggml' / 'include'}", f"-I{source / 'common'}",
                    f"-L{prefix / 'lib'}",
                    *[f"-l{lib}" for lib in libs], f"-Wl,-rpath,{prefix / 'lib'}", "-lpthread"], check=True)
    return exe


@pytest.mark.parametrize("threads", [1, 2])
def test_flash_attention_matches_a_double_precision_reference_on_batched_shapes(tmp_path, threads):
    exe = _compile_check(tmp_path, "flash_attn_check", ["ggml", "ggml-base", "ggml-cpu"])
    out = subprocess.run([str(exe), str(threads)], capture_output=True, text=True, check=True, timeout=120).stdout
    cases = [(m[1], int(m[2]), float(m[3]), int(m[4]))
             for m in re.finditer(r"case (\S+) rows (\d+) max_err (\S+) nan (\d+)", out)]
    # every case ran, each batch wide enough for the tiled path (64 rows or more)
    assert [c[0] for c in cases] == (["interleaved", "interleaved", "causal_prompt", "mixed"] + ["alternating"] * 10
                                     + ["runs"]), out
    for name, rows, err, nan in cases:
        assert nan == 0 and err < PER_ROW_BOUND, out
        # the runs case stays under 64 rows (ggml's per-row path), the others reach the tiles
        assert (rows < 64) if name == "runs" else (rows >= 64), out
    # one sequence's causal prompt attends densely: it stays on the F32 GEMM
    assert cases[2][2] < TILED_BOUND, out


def test_a_context_bounding_its_outputs_keeps_one_output_buffer(tmp_path):
    # decision 0086: llama.cpp made a new, cleared output buffer each time a
    # decode asked for more rows than before; a context made with
    # n_outputs_max holds the buffer for all of them from the start
    from spec_actor import default_model_path

    exe = _compile_check(tmp_path, "output_buffer_check", ["llama", "ggml", "ggml-base"])
    out = subprocess.run([str(exe), str(default_model_path()), "48"], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    assert out.split() == ["rows", "48", "same_buffer", "1", "first_logit_finite", "1"], out


def test_logits_kept_in_place_equal_the_copied_ones(tmp_path):
    # decision 0089: a context that asks for it reads a one-micro-batch
    # decode's logits where the graph wrote them, bit for bit what the copy
    # gave; a batch of several micro-batches is still copied
    from spec_actor import default_model_path

    exe = _compile_check(tmp_path, "logits_in_place_check", ["llama", "ggml", "ggml-base"])
    out = subprocess.run([str(exe), str(default_model_path())], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    assert out.splitlines() == ["case one_ubatch rows 24 equal 1 in_place 1", "case split rows 40 equal 1 in_place 0"], out


def test_quantized_products_match_a_reference_and_do_not_depend_on_the_batch(tmp_path):
    # decision 0090: with AVX512-VNNI, llamafile's quantized product takes
    # spec_actor's kernels (16 columns a register from 8 columns, 8 rows a
    # register below); on any CPU, every element must be within float
    # rounding of the double-precision product of the same quantized values,
    # and a column's results the same bits however many columns (2 to 37, or
    # 1 to 37) and threads share its product
    exe = _compile_check(tmp_path, "q0_matmul_check", ["ggml", "ggml-base", "ggml-cpu"])
    # with AVX512-VNNI (and the build takes it wherever the CPU has it) one
    # row is routed to the same kernels, so it joins the comparison
    one_column = llama_build.cpu_features() >= {"avx512f", "avx512bw", "avx512dq", "avx512_vnni"}
    out = subprocess.run([str(exe), "1" if one_column else "0"], capture_output=True, text=True, check=True,
                         timeout=300).stdout
    cases = [(m[1], int(m[2]), int(m[3]), float(m[4]), int(m[5]), int(m[6]))
             for m in re.finditer(r"case (\S+) m (\d+) k (\d+) max_rel_err (\S+) nan (\d+) invariant (\d)", out)]
    assert [c[0] for c in cases] == ["q8_0"] * 3 + ["q5_0"] * 3 + ["q4_0"] * 2, out
    for _type, _m, _k, err, nan, invariant in cases:
        # measured up to 6e-8 of the sum of the products' magnitudes
        assert nan == 0 and err < 1e-5 and invariant == 1, out


def test_an_ngram_mod_drafter_forgets_in_place_what_it_learned(tmp_path):
    # decision 0092: after common_speculative_forget an ngram-mod drafter
    # that an earlier sequence taught drafts what a new one drafts (nothing,
    # here: the n-gram it learned is not in the new context); a drafter with
    # no way to forget answers false, and auto makes a new one
    exe = _compile_check(tmp_path, "speculative_forget_check", ["llama-common", "llama", "ggml", "ggml-base"])
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=120).stdout
    lines = dict(line.split(" ", 2)[1:] for line in out.splitlines())
    fields = {name: dict(zip(rest.split()[::2], map(int, rest.split()[1::2]))) for name, rest in lines.items()}
    assert fields["ngram-mod"] == {"learned": 8, "forgot": 1, "draft": 0, "new_draft": 0, "equal": 1}, out
    assert fields["ngram-simple"]["forgot"] == 0, out


def test_a_one_token_decode_keeps_no_snapshots_and_touches_few_metadata_pages(tmp_path):
    # decision 0093: a context with rollback snapshots (n_rs_seq = 3) decodes
    # one token through the graph of a context without them (same nodes, no
    # snapshot copies, bit-identical logits), while a prompt's multi-token
    # decode still copies its snapshots; decision 0094: the first context of
    # the process makes and runs its graphs without faulting in even one of
    # its metadata buffers' pages (zeroing them touched three buffers)
    from spec_actor.testing import tiny_models

    model = tiny_models.write_hybrid_mtp_model(tmp_path / "hybrid.gguf")
    exe = _compile_check(tmp_path, "recurrent_graph_check", ["llama", "ggml", "ggml-base"])
    out = subprocess.run([str(exe), str(model)], capture_output=True, text=True, check=True, timeout=120).stdout
    fields = {line.split(" ", 1)[0]: line.split()[1:] for line in out.splitlines()}
    faults, buffer_pages = int(fields["faults"][0]), int(fields["faults"][2])
    assert buffer_pages > 500 and faults < buffer_pages, out
    cpy_plain, cpy_snapshots = map(int, fields["prompt"][1:3])
    assert cpy_snapshots > cpy_plain, out
    nodes = fields["token"]
    assert nodes[1] == nodes[2] and nodes[4] == nodes[5] and nodes[7] == "1", out
