"""Every bad input of ``tests/bad_inputs/`` refused by the step it names, with a message that names the
file or key, and never a traceback (issue 34's table); the valid kit itself passes init and check."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bad_inputs.harness import STEPS, Case, Inputs, run_case
from tests.bad_inputs.kit import Kit, make_kit


def _cases() -> list[Case]:
    import importlib

    cases: list[Case] = []
    for area in ("model_cases", "data_cases", "project_cases", "baseline_cases"):
        try:
            module = importlib.import_module(f"tests.bad_inputs.{area}")
        except ModuleNotFoundError as exc:
            if exc.name != f"tests.bad_inputs.{area}":
                raise
            continue
        cases += module.CASES
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    return cases


CASES = _cases()


@pytest.fixture(scope="session")
def kit(tmp_path_factory) -> Kit:
    return make_kit(tmp_path_factory.mktemp("kit"))


def _param(case: Case):
    return pytest.param(case, id=case.id, marks=[getattr(pytest.mark, m) for m in case.marks])


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_a_bad_input_is_refused_by_its_step_naming_what_is_wrong(case: Case, kit: Kit, tmp_path: Path) -> None:
    ran = run_case(case, kit, tmp_path)
    shown = "\n".join(f"$ edgebuild {r.step} -> {r.exit_code}\n{r.output}{r.traceback or ''}" for r in ran)
    assert all(r.traceback is None for r in ran), shown
    assert all("Traceback (most recent call last)" not in r.output for r in ran), shown
    if case.step == "note":
        assert all(r.exit_code == 0 for r in ran), shown
        said = "\n".join(r.output for r in ran).lower()
    else:
        refused = ran[-1]
        assert refused.step == case.step and refused.exit_code == case.exit_code, shown
        assert all(r.exit_code == 0 for r in ran[:-1]), shown
        said = refused.output.lower()
        if case.step == "init":
            assert not (tmp_path / "project" / "edgebuild.toml").exists(), "init wrote a project it refused"
    missing = [s for s in case.says if s.lower() not in said]
    assert not missing, f"the message does not name {missing}:\n{shown}"


def _valid(model_of: str, data_of: str):
    def make(kit: Kit, folder: Path) -> Inputs:
        return Inputs(model=getattr(kit, model_of), data=getattr(kit, data_of))
    return make


@pytest.mark.parametrize("model_of, data_of", [("classifier", "folders"), ("detector", "yolo"),
                                               ("detector", "coco"), ("detector", "voc")])
def test_the_kit_itself_passes_init_and_check(kit: Kit, tmp_path: Path, model_of: str, data_of: str) -> None:
    case = Case(f"valid-{data_of}", _valid(model_of, data_of), "note", 0, ())
    ran = run_case(case, kit, tmp_path)
    assert [r.step for r in ran] == ["init", "check"] and all(r.exit_code == 0 for r in ran), \
        "\n".join(r.output + (r.traceback or "") for r in ran)


def test_the_table_is_large_enough_and_covers_every_area_and_step() -> None:
    assert len(CASES) >= 100, len(CASES)
    assert {c.step for c in CASES} >= {*STEPS[:2], "note"}
