"""The noise model on the example nondeterministic model (examples/noise, docs/shadow.md).

predict() runs directly (no server). A baseline of control-vs-control pairs is taken
first; then 200 fresh control-vs-control pairs must be reported as different in fewer than
1 % of pairs, and 200 control-vs-candidate pairs (red channel +10 levels) in at least 99 %.
"""

from __future__ import annotations

import tempfile

import pytest

from shadow import compare, noise
from shadow.thresholds import Thresholds
from tests.support.shadow import load_noise_model, predict_outcome

PAIRS = 200
BASELINE_PAIRS = 40


@pytest.fixture
def model(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return load_noise_model()


async def pairs(model, control_cls, candidate_cls, prefix: str, count: int):
    control, candidate = control_cls(), candidate_cls()
    found = []
    for index in range(count):
        prompt = f"{prefix} {index}"
        found.append(await compare.compare(
            predict_outcome(control, prompt), predict_outcome(candidate, prompt),
            pair_id=prompt,
        ))
    return found


@pytest.mark.timeout(300)
async def test_control_noise_is_not_reported_and_the_red_shift_is(model):
    thresholds = Thresholds()
    baseline = noise.Baseline.from_pairs(
        await pairs(model, model.Predictor, model.Predictor, "baseline", BASELINE_PAIRS)
    )
    assert baseline.pairs == BASELINE_PAIRS and baseline.breaks == 0
    limits = baseline.limits(thresholds)

    again = await pairs(model, model.Predictor, model.Predictor, "control", PAIRS)
    false_differences = [
        judgement for judgement in (noise.judge(p, baseline, thresholds, limits) for p in again)
        if judgement.differs
    ]
    assert len(false_differences) < 0.01 * PAIRS, false_differences
    # the outputs really are nondeterministic: bytes differ in every control pair
    assert all(p.measures["file_bytes"] == 1.0 for p in again)

    shifted = await pairs(model, model.Predictor, model.CandidatePredictor, "candidate", PAIRS)
    judgements = [noise.judge(p, baseline, thresholds, limits) for p in shifted]
    caught = [j for j in judgements if j.differs]
    assert len(caught) >= 0.99 * PAIRS
    assert all(not j.breaks for j in judgements), "a colour cast is drift, not a break"
    assert {f.measure for j in caught for f in j.findings} == {"image_color"}


def test_a_seed_makes_the_model_deterministic(model):
    first = predict_outcome(model.Predictor(), "same", seed=7)
    second = predict_outcome(model.Predictor(), "same", seed=7)
    assert first.files[0].sha256 == second.files[0].sha256


async def test_without_a_baseline_the_noise_itself_is_reported(model):
    # honest fallback: no baseline means "held against the margins alone"
    thresholds = Thresholds(margins={"image_color": 0.5})
    found = await pairs(model, model.Predictor, model.Predictor, "nobase", 5)
    judgements = [noise.judge(p, noise.Baseline(), thresholds) for p in found]
    assert all(j.differs for j in judgements)
