from pathlib import Path

import cffi
import pytest

from spec_actor._errors import ConfigError
from spec_actor._spec import AUTO_N_DRAFT_CEILING, SPEC_TYPES, Spec
from spec_actor.nif._pack import new_struct
from spec_actor.nif.schema import SPEC_TYPE_IDS

HEADER = Path(__file__).resolve().parents[1] / "native" / "abi" / "spec_actor.h"
ffi = cffi.FFI()
ffi.cdef(HEADER.read_text().split("/* CDEF-BEGIN */")[1].split("/* CDEF-END */")[0])
SA_SPEC = ffi.typeof("sa_spec_type").relements  # enum name -> value

MODEL_DRAFTS = {"draft-simple", "draft-eagle3", "draft-dflash", "draft", "eagle3", "dflash"}


def make(type_: str, **kw) -> Spec:
    """Spec(type_, **kw), with a draft model path where the type needs one."""
    if type_ in MODEL_DRAFTS:
        kw.setdefault("draft_model", "draft.gguf")
    return Spec(type_, **kw)


def test_type_names_are_the_header_enum_in_order():
    # llama.cpp's names as the library reports them, against the header's enum.
    by_value = sorted(SA_SPEC.items(), key=lambda kv: kv[1])
    assert SPEC_TYPES == tuple(name[len("SA_SPEC_"):].lower().replace("_", "-") for name, _ in by_value)
    assert SPEC_TYPE_IDS == {n: v for n, v in zip(SPEC_TYPES, (v for _, v in by_value))}


@pytest.mark.parametrize(
    ("given", "canonical"),
    [("mtp", "draft-mtp"), ("draft", "draft-simple"), ("eagle3", "draft-eagle3"), ("dflash", "draft-dflash"),
     ("ngram_map_k4v", "ngram-map-k4v"), (" NGRAM-MOD ", "ngram-mod"), ("draft_mtp", "draft-mtp")],
)  # fmt: skip
def test_type_names_normalise(given, canonical):
    assert make(given).type == canonical


def test_unknown_type_lists_valid_names():
    with pytest.raises(ConfigError, match="'eagle'.*ngram-cache.*mtp=draft-mtp"):
        Spec("eagle")
    with pytest.raises(ConfigError, match="expected a str"):
        Spec(3)  # type: ignore[arg-type]


def test_defaults_per_type():
    assert Spec().type == "none" and Spec().n_draft == 0
    assert Spec("mtp").n_draft == 3
    assert make("draft").n_draft == 3
    assert Spec("ngram-mod").n_draft == 8
    spec = Spec("ngram-simple")
    assert (spec.n_min, spec.p_min, spec.p_split) == (0, 0.0, 0.1)
    assert (spec.ngram_size_n, spec.ngram_size_m, spec.ngram_min_hits) == (12, 48, 1)
    assert (spec.ngram_mod_n_match, spec.ngram_mod_n_min, spec.ngram_mod_n_max) == (12, 48, 64)


def test_flags():
    assert Spec("mtp").is_mtp and not Spec("mtp").needs_draft_model
    assert make("eagle3").needs_draft_model and not make("eagle3").is_mtp
    assert not Spec("ngram-cache").needs_draft_model
    auto = Spec("ngram-mod", n_draft="auto")
    assert auto.adaptive and auto.max_draft == AUTO_N_DRAFT_CEILING == 16
    assert not Spec("ngram-mod").adaptive and Spec("ngram-mod").max_draft == 8
    # drafters that always draft their full length keep the fixed default as ceiling
    assert Spec("mtp", n_draft="auto").max_draft == 3
    assert make("eagle3", n_draft="auto").max_draft == 3
    assert make("draft-simple", n_draft="auto").max_draft == AUTO_N_DRAFT_CEILING


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        (dict(type="mtp", n_draft=0), "n_draft=0 is invalid: expected an int from 1 to 64"),
        (dict(type="mtp", n_draft=65), "n_draft=65 is invalid: expected an int from 1 to 64"),
        (dict(type="mtp", n_draft=2.0), "n_draft=2.0"),
        (dict(type="mtp", n_draft="max"), "n_draft='max'"),
        (dict(type="none", n_draft="auto"), "n_draft='auto' needs a speculative type"),
        (dict(type="mtp", n_draft=4, n_min=5), "n_min=5 is invalid: expected an int from 0 to 4"),
        (dict(type="ngram-mod", n_draft="auto", n_min=17), "n_min=17 is invalid: expected an int from 0 to 16"),
        (dict(type="mtp", n_draft="auto", n_min=4), "n_min=4 is invalid: expected an int from 0 to 3"),
        (dict(type="mtp", n_min=-1), "n_min=-1"),
        (dict(type="mtp", p_min=1.5), "p_min=1.5 is invalid: expected a finite number >= 0 and <= 1"),
        (dict(type="mtp", p_min=float("nan")), "p_min=nan"),
        (dict(type="mtp", p_min=-0.1), "p_min=-0.1"),
        (dict(type="mtp", p_split=2), "p_split=2"),
        (dict(type="ngram-simple", ngram_size_n=0), "ngram_size_n=0 is invalid: expected an int from 1 to 1024"),
        (dict(type="ngram-simple", ngram_size_m=0), "ngram_size_m=0"),
        (dict(type="ngram-simple", ngram_min_hits=0), "ngram_min_hits=0"),
        (dict(type="ngram-mod", ngram_mod_n_match=0), "ngram_mod_n_match=0"),
        (dict(type="ngram-mod", ngram_mod_n_max=65), "ngram_mod_n_max=65 is invalid: expected an int from 1 to 64"),
        (dict(type="ngram-mod", ngram_mod_n_min=9, ngram_mod_n_max=8), "ngram_mod_n_min=9"),
        (dict(type="draft-simple"), "draft-simple needs draft_model=..."),
        (dict(type="dflash"), "draft-dflash needs draft_model=..."),
        (dict(type="mtp", draft_model="x.gguf"), "draft-mtp does not use draft_model"),
    ],
)
def test_bad_values_raise_config_error_naming_parameter_and_range(kw, needle):
    with pytest.raises(ConfigError) as info:
        Spec(**kw)
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError)


def test_boundaries_accepted():
    assert Spec("mtp", n_draft=64, n_min=64, p_min=1.0).n_min == 64
    assert Spec("mtp", n_draft=1, p_min=0).p_min == 0.0
    assert Spec("none", n_draft=5).n_draft == 5


def test_check_batch():
    spec = Spec("ngram-mod", n_draft=8)
    spec.check_batch(9)
    with pytest.raises(ConfigError, match="n_batch=8 .* at least 9"):
        spec.check_batch(8)
    with pytest.raises(ConfigError, match="at least 17"):
        Spec("ngram-mod", n_draft="auto").check_batch(16)
    with pytest.raises(ConfigError, match="at least 4"):
        Spec("mtp", n_draft="auto").check_batch(3)
    Spec().check_batch(1)


def test_native_params_are_packed_into_the_struct_by_nif():
    params = make("draft", n_draft="auto", n_min=2, p_min=0.75, p_split=0.25, ngram_size_n=3, ngram_size_m=5,
                  ngram_min_hits=2, ngram_mod_n_match=7, ngram_mod_n_min=4, ngram_mod_n_max=9).native_params()
    assert params == {
        "type": "draft-simple", "n_draft": 16, "adaptive": 1, "n_min": 2, "p_min": 0.75, "p_split": 0.25,
        "ngram_size_n": 3, "ngram_size_m": 5, "ngram_min_hits": 2,
        "ngram_mod_n_match": 7, "ngram_mod_n_min": 4, "ngram_mod_n_max": 9,
    }  # fmt: skip
    keep: list = []
    struct = new_struct("sa_spec_params *", {**params, "type": SPEC_TYPE_IDS[params["type"]]}, keep)
    assert struct.type == SA_SPEC["SA_SPEC_DRAFT_SIMPLE"]
    assert (struct.n_draft, struct.adaptive, struct.n_min, struct.p_min) == (16, 1, 2, 0.75)
    assert (struct.ngram_mod_n_match, struct.ngram_mod_n_min, struct.ngram_mod_n_max) == (7, 4, 9)
    assert keep == []
    cache = Spec("ngram-cache", n_draft=5).native_params()
    assert (cache["type"], cache["n_draft"], cache["adaptive"]) == ("ngram-cache", 5, 0)


def test_equal_hashable_and_repr_shows_non_defaults():
    assert Spec("ngram_mod") == Spec("ngram-mod", n_draft=8)
    assert hash(Spec("mtp")) == hash(Spec("draft-mtp", n_draft=3))
    assert len({Spec("mtp"), Spec("draft-mtp"), Spec("mtp", n_draft=4)}) == 2
    assert repr(Spec()) == "Spec('none')"
    assert repr(Spec("mtp")) == "Spec('draft-mtp')"
    assert repr(Spec("ngram_mod", n_draft=4, p_min=0.5)) == "Spec('ngram-mod', n_draft=4, p_min=0.5)"
    assert repr(make("draft")) == "Spec('draft-simple', draft_model='draft.gguf')"
    with pytest.raises(AttributeError):
        Spec().n_draft = 4  # type: ignore[misc]
