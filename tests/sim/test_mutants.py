"""The simulator catches real bugs (issue 29, item 5): each mutant of `tests/sim/mutants/`,
applied to a copy of the tree, is reported by the invariant it breaks within its seed budget,
and the seed that caught it runs clean on an unpatched copy (the control).

The searches cost seconds to minutes of CPU each: `make test` runs the mutants marked `suite`
in mutants.toml (caught within a seed or two), `ROTA_SOAK=1` (make soak) runs them all. That
every patch still applies to the tree is checked always, and cheaply: a patch the code moved
away from fails loudly, naming it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trial_scale import SOAK

from .mutation import (
    LAYERS,
    STUCK,
    Mutant,
    PatchDoesNotApply,
    check_applies,
    control,
    detect,
    mutants,
    simulate,
    tree,
)

MUTANTS = mutants()


def _marks(mutant: Mutant) -> list[pytest.MarkDecorator]:
    marks: list[pytest.MarkDecorator] = [pytest.mark.slow]
    if not mutant.suite and not SOAK:
        marks.append(pytest.mark.skip(reason="a long search: runs under make soak (ROTA_SOAK=1)"))
    if mutant.blind:
        marks.append(pytest.mark.xfail(reason=mutant.blind, strict=True))
    return marks


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_patch_applies_to_the_tree(mutant: Mutant) -> None:
    check_applies(mutant)


def test_a_patch_that_does_not_apply_fails_naming_its_mutant(tmp_path: Path) -> None:
    stale = tmp_path / "stale.patch"
    stale.write_text(
        "--- a/domain/fences.py\n+++ b/domain/fences.py\n@@ -1,1 +1,1 @@\n"
        "-this line is not in the file\n+nor is this one\n"
    )
    mutant = Mutant("stale", stale, "no_stale_epoch_write", 1, 1.0, "a patch gone stale")
    with pytest.raises(PatchDoesNotApply, match=r"mutant stale: stale\.patch does not apply"):
        check_applies(mutant)


def test_every_mutant_names_a_known_invariant() -> None:
    from rota.testing.sim.checks import names

    known = names()
    assert len(MUTANTS) >= 6
    for mutant in MUTANTS:
        assert mutant.invariant in known, mutant.name
        assert mutant.patch.is_file(), mutant.name
        touched = [
            line.split()[-1][2:] for line in mutant.patch.read_text().splitlines()
            if line.startswith("+++ ")
        ]  # fmt: skip
        assert touched, f"{mutant.name}: its patch touches no file"
        for path in touched:  # product code only: never the simulator or its invariants
            assert path.split("/")[0] in {"domain", "application", "projections"}, path


@pytest.mark.slow
def test_the_copy_is_what_the_simulator_imports() -> None:
    """A mutant changes what runs: the copy's module is the one imported (the worker asserts
    it), and a change to it shows in the simulation (here, a domain module that fails on
    import makes the run fail)."""
    mutant = MUTANTS[0]
    with tree(mutant) as root:
        assert all((root / "rota" / layer).is_symlink() for layer in LAYERS[1:])
        (root / "domain" / "fences.py").write_text("raise ImportError('the copy is imported')\n")
        with pytest.raises(RuntimeError, match="the copy is imported"):
            simulate(root, 1, 1, 0.01)


@pytest.mark.slow
def test_a_run_that_does_not_finish_is_reported_stuck() -> None:
    """A livelock (a mutant's pass that keeps appending at one instant) ends the search
    as a finding of its own instead of hanging it."""
    with tree(None) as root:
        (run,) = simulate(root, 1, 5, 2.0, cpu_limit=0.05)
    assert run["seed"] == 1
    assert run["violation"]["invariant"] == STUCK
    assert "without finishing its run" in run["violation"]["message"]


@pytest.mark.parametrize("mutant", [pytest.param(m, id=m.name, marks=_marks(m)) for m in MUTANTS])
def test_mutant_is_caught_by_its_invariant(mutant: Mutant) -> None:
    found = detect(mutant)
    assert found.violation is not None, (
        f"{mutant.name} ({mutant.description}) went undetected in {found.seeds_run} seeds "
        f"of {mutant.hours} h"
    )
    assert found.invariant == mutant.invariant, (
        f"{mutant.name} was reported by {found.invariant}, not {mutant.invariant}, at seed "
        f"{found.seed}: {found.violation['message']}"
    )
    assert found.seed is not None
    assert control(found.seed, mutant.hours, mutant.flow) is None, (
        f"seed {found.seed} fails without {mutant.name} too: the violation is not the patch's"
    )
