"""The LBLP paper's claims can fail: on hand-made runs where every check holds, moving each check's input past its
band turns its verdict; a check made constant is caught; latency is the streamed one the paper measures."""

from __future__ import annotations

import pytest

from claims_mutation import assert_every_check_turns, constant
from hetsplit.experiments.lblp import Case, LblpConfig, LblpResults, Run, Sweep
from hetsplit.experiments.lblp_claims import check_claims

UNITS = ("imc0", "imc1", "imc2", "dpu0")


def run(alg: str, rate: float, loaded_ms: float, util: tuple[float, ...] = (0.8, 0.8, 0.8, 0.5),
        alone_ms: float = 1.0, seed: int | None = None) -> Run:
    return Run(alg, seed, rate, rate, loaded_ms * 1e-3, alone_ms * 1e-3, dict(zip(UNITS, util)),
               {u: [i] for i, u in enumerate(UNITS)}, {u: 1.0 + i for i, u in enumerate(UNITS)}, 0.0)


def case(model: str, units: int, imc: int, lblp=(100.0, 10.0), wb=(60.0, 13.0), rr=(50.0, 14.0),
         rd=(70.0, 12.0)) -> Case:
    return Case(model, f"imce-{units}-{imc}", units, imc, 20,
                [run("lblp", *lblp), run("wb", *wb), run("rr", *rr), run("rd", *rd, seed=0)])


def base_results() -> LblpResults:
    resnet8 = Sweep("resnet8", 14, 2, [case("resnet8", 4, 3), case("resnet8", 6, 5, rr=(50.0, 14.0), rd=(55.0, 14.0)),
                                       case("resnet8", 8, 7, rr=(65.0, 14.0), rd=(40.0, 14.0))])
    yolo = Sweep("yolov8n", 40, 5, [case("yolov8n", 8, 6, wb=(90.0, 10.3)), case("yolov8n", 12, 9, wb=(95.0, 10.5))])
    table = Case("resnet18", "imce-12-8", 12, 8, 30,
                 [run("lblp", 100.0, 10.0, (0.80, 0.78, 0.77, 0.4)), run("wb", 45.0, 14.0, (0.5, 0.12, 0.12, 0.9))])
    mix = [case("resnet18", 12, 10, lblp=(120.0, 9.0)), case("resnet18", 12, 8, lblp=(110.0, 9.5))]
    return LblpResults(LblpConfig.quick(), [resnet8, yolo], mix, table, [], 1.0)


def set_run(where, alg: str, **fields):
    def mutate(r: LblpResults) -> None:
        c = where(r)
        for x in c.runs_of(alg):
            for k, v in fields.items():
                setattr(x, k, v)
    return mutate


def sweep_case(model: str, i: int):
    return lambda r: r.sweep(model).cases[i]


TABLE = lambda r: r.table  # noqa: E731
MUTATIONS = {
    "lblp-best": [set_run(sweep_case("resnet8", 0), "wb", rate=150.0),
                  set_run(sweep_case("resnet8", 1), "rd", latency_s=5e-3)],
    "resnet18-12-rate": [set_run(TABLE, "wb", rate=70.0)],
    "resnet18-12-latency": [set_run(TABLE, "wb", latency_s=11.6e-3), set_run(TABLE, "wb", latency_s=20e-3)],
    "table1-utilization-lblp": [set_run(TABLE, "lblp", utilization=dict(zip(UNITS, (0.5, 0.5, 0.5, 0.5))))],
    "table1-utilization-wb": [set_run(TABLE, "wb", utilization=dict(zip(UNITS, (0.9, 0.6, 0.6, 0.9))))],
    "table1-uniform": [set_run(TABLE, "lblp", utilization=dict(zip(UNITS, (0.9, 0.1, 0.1, 0.4))))],
    "yolo-latency-gap": [set_run(sweep_case("yolov8n", 1), "wb", latency_s=12e-3)],
    "mix-lblp-better": [set_run(lambda r: r.mix[0], "lblp", rate=50.0), set_run(lambda r: r.mix[1], "lblp", rate=50.0)],
    "mix-more-dpus-lower-rate": [set_run(lambda r: r.mix[1], "lblp", rate=130.0)],
    "rr-rd-vs-wb": [lambda r: [set_run(sweep_case("resnet8", i), a, rate=55.0)(r) for i in range(3) for a in ("rr", "rd")],
                    lambda r: [set_run(sweep_case("resnet8", i), a, rate=65.0)(r) for i in range(3) for a in ("rr", "rd")]],
}


def test_every_lblp_check_turns_when_its_input_leaves_the_band():
    assert_every_check_turns(check_claims, base_results(), MUTATIONS)


@pytest.mark.parametrize("key", ["resnet18-12-latency", "yolo-latency-gap", "lblp-best"])
def test_an_lblp_check_made_constant_is_caught(key):
    with pytest.raises(AssertionError, match=key):
        assert_every_check_turns(constant(check_claims, key), base_results(), MUTATIONS)


def test_latency_is_the_streamed_one_the_paper_measures():
    base = base_results()
    moved = base_results()
    for c in [moved.table, *moved.sweep("yolov8n").cases]:
        for x in c.runs_of("wb"):
            x.unloaded_latency_s *= 3        # one input alone: not the paper's latency, beside it only
    for key in ("resnet18-12-latency", "yolo-latency-gap"):
        a, b = check_claims(base).get(key), check_claims(moved).get(key)
        assert (a.verdict, a.ours) == (b.verdict, b.ours) and "streamed" in a.claim, key
