from __future__ import annotations

import pytest

from cuda_agent.measure import module_from_source
from cuda_agent.synth.compose import ProgramComposer
from cuda_agent.tasks.validate import validate_source


@pytest.fixture(scope="module")
def composer(catalog):
    return ProgramComposer(catalog.usable(), run_seed=7)


def test_candidate_depends_only_on_run_seed_and_index(catalog, composer):
    again = ProgramComposer(list(reversed(catalog.usable())), run_seed=7)
    for i in (0, 5, 17):
        assert composer.compose(i).code == again.compose(i).code
    assert composer.compose(1).code != ProgramComposer(catalog.usable(), run_seed=8).compose(1).code


def test_composed_tasks_are_valid_readable_and_run(composer):
    structures = set()
    for i in range(40):
        c = composer.compose(i)
        validate_source(c.code, c.name)
        assert "{" not in c.code and 1 <= len(c.ops) <= 5
        structures.add(c.structure)
        if i < 12:  # run a few for real, at a small size
            small = c.program.with_batch(2).with_spatial(0.25).source()
            mod = module_from_source(small, "t", "t.py")
            out = mod.Model(*mod.get_init_inputs())(*mod.get_inputs())
            assert out.is_floating_point()
    assert structures >= {"chain", "residual"}


def test_size_search_rewrites_only_the_constants(composer):
    c = next(composer.compose(i) for i in range(50) if composer.compose(i).program.layout == "NCHW")
    p = c.program
    bigger = p.with_batch(p.batch * 4).with_spatial(4.0)
    assert f"batch_size = {p.batch * 4}" in bigger.source()
    assert bigger.dims[2] == min(4096, p.dims[2] * 2)
    strip = lambda s: [ln for ln in s.splitlines() if " = " not in ln or ln.startswith(" ")]  # noqa: E731
    assert strip(bigger.source()) == strip(p.source())


def test_a_wanted_class_is_what_the_composed_task_is(composer):
    from cuda_agent.synth.categories import task_class

    assert {"conv", "gemm", "attention", "recurrent", "norm", "loss"} <= composer.classes()
    for want in sorted(composer.classes()):
        for i in range(3):
            c = composer.compose(i, want)
            assert task_class(c.categories) == want and c.want == want
            assert not any(s.terminal for s in map(composer_seed(composer), c.ops[:-1]))


def composer_seed(composer):
    seeds = {s.name: s for s in composer.seeds}
    return lambda name: seeds[name]
