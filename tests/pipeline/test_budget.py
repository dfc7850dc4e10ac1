"""What a study leaves out (--datasets, --max-gpu-hours), the papers' order of importance, where the runs train
(the CPU pool or GPU workers, by measured rates), and the plan's width."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from dmllab.experiments import registry
from dmllab.experiments.artifact import TIERS
from dmllab.experiments.execution import Execution
from dmllab.pipeline import budget, cost, jobs, placement
from dmllab.pipeline.cost import Calibration, Price, Unpriced
from dmllab.pipeline.plan import make_plan
from dmllab.pipeline.plan_text import WIDTH, format_plan


@pytest.fixture
def store_env(tmp_path, monkeypatch):
    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    return tmp_path


def _hours(h: float) -> Price:
    return Price(h * 3600, h * 3600, h * 3600)


def test_select_takes_artifacts_in_order_while_they_fit():
    ordered = [
        ("headline", {"a": _hours(3), "b": _hours(2)}),
        ("shares_a", {"a": _hours(3), "c": _hours(1)}),  # a is already chosen: only c counts
        ("too_big", {"d": _hours(5)}),
        ("unknown", {"e": Unpriced("no model_step row for googlenet at fp32")}),
        ("stored", {"f": _hours(100)}),  # stored: free
        ("small", {"g": _hours(0.5)}),  # a later, cheaper one still fits
        ("toy", {}),
    ]
    chosen, left_out = budget.select(ordered, {"f"}, 7.0)
    assert chosen == ["headline", "shares_a", "stored", "small", "toy"]
    assert left_out == {
        "too_big": "needs 5.0 GPU-h, 1.0 of 7 left",
        "unknown": "its cost is unknown: no model_step row for googlenet at fp32",
    }
    assert budget.select(ordered, set(), 0.0)[0] == ["toy"]


def test_the_papers_order_of_importance_puts_each_papers_headline_table_first():
    order = registry.by_importance(registry.all_artifacts())
    assert all(a.tier in TIERS for a in order)
    assert [TIERS.index(a.tier) for a in order] == sorted(TIERS.index(a.tier) for a in order)
    assert [a.id for a in order[:4]] == [
        "pnpp_table3_6_sota",
        "pa_table2_4_sota",
        "heated_table1_2_variants",
        "ps_table6_losses",
    ]
    with pytest.raises(ValueError, match="unknown tier 'main'"):
        from dataclasses import replace

        replace(order[0], tier="main")


def test_datasets_cut_an_artifacts_own_list_or_leave_it_out():
    four = registry.get("pnpp_table3_6_sota")  # datasets: cub, cars, sop, inshop
    assert budget.dataset_overrides(four, "paper", ("cub",)) == ({"datasets": ["cub"]}, "")
    assert budget.dataset_overrides(four, "paper", None) == ({}, "")
    # the offline benchmark is always there
    assert budget.dataset_overrides(four, "quick", ("cub",)) == ({}, "")
    cars = registry.get("pa_fig1_convergence")  # dataset: cars
    assert budget.dataset_overrides(cars, "paper", ("cub",)) == ({}, "needs cars (not in --datasets)")
    assert budget.check_datasets("cub, sop") == ("cub", "sop")
    with pytest.raises(
        ValueError, match="--datasets birds: name the datasets you have, .* among cars, cub, inshop, sop"
    ):
        budget.check_datasets("cub,birds")


def test_a_paper_plan_limited_to_cub_plans_cub_runs_only(store_env):
    arts = registry.select(
        "pnpp_table3_6_sota,pnpp_table12_13_normsoftmax,pa_fig1_convergence,pnpp_fig3_two_moons"
    )
    plan = make_plan(arts, "paper", Execution(device="cpu"), datasets="cub")
    assert {r.run.config.dataset for r in plan.runs} == {"cub"}
    assert plan.left_out == {"pa_fig1_convergence": "needs cars (not in --datasets)"}
    assert [a.id for a in plan.artifacts] == [
        "pnpp_table3_6_sota",
        "pnpp_table12_13_normsoftmax",
        "pnpp_fig3_two_moons",
    ]
    assert plan.parameters(registry.get("pnpp_table3_6_sota"))["datasets"] == [
        "cub"
    ]  # what the notebook gets
    full = make_plan(arts[:1], "paper", Execution(device="cpu"))
    assert len(plan.runs) < len(full.runs) and {r.run.config.dataset for r in full.runs} == {
        "cub",
        "cars",
        "sop",
        "inshop",
    }
    text = format_plan(plan)
    assert "left out (--datasets cub): 1 artifacts" in text and "  pa_fig1_convergence: needs cars" in text


def test_a_budget_keeps_the_most_important_artifacts_that_fit(store_env):
    cal = cost.load_calibration(cost.DEFAULT_CALIBRATION)
    arts = registry.select("pnpp_table3_6_sota,pnpp_fig4c_proxy_lr,pnpp_appd_googlenet,pnpp_fig3_two_moons")
    everything = make_plan(arts, "paper", Execution(device="cpu"), datasets="cub", calibration=cal)
    headline = sum(r.price.hours for r in everything.runs if "pnpp_table3_6_sota" in r.artifacts)
    # what pnpp_fig4c_proxy_lr adds to the headline table's runs
    sweep = sum(r.price.hours for r in everything.runs if r.artifacts == ("pnpp_fig4c_proxy_lr",))
    hours = {"pnpp_table3_6_sota": headline, "pnpp_fig4c_proxy_lr": sweep}
    assert hours["pnpp_table3_6_sota"] > hours["pnpp_fig4c_proxy_lr"] > 0
    plan = make_plan(
        arts,
        "paper",
        Execution(device="cpu"),
        datasets="cub",
        calibration=cal,
        max_gpu_hours=hours["pnpp_table3_6_sota"] + 0.1,
    )
    assert [a.id for a in plan.artifacts] == [
        "pnpp_table3_6_sota",
        "pnpp_fig3_two_moons",
    ]  # the toy costs nothing
    assert plan.left_out["pnpp_fig4c_proxy_lr"].startswith("needs ")
    assert "no model_step row for googlenet" in plan.left_out["pnpp_appd_googlenet"]
    assert sum(r.price.seconds for r in plan.missing) / 3600 <= hours["pnpp_table3_6_sota"] + 0.1
    text = format_plan(plan)
    assert "GPU-hours on NVIDIA H100 80GB HBM3" in text and "taken in the papers' order of importance" in text
    with pytest.raises(ValueError, match="--max-gpu-hours"):
        make_plan(arts, "paper", Execution(device="cpu"), max_gpu_hours=1.0)  # no calibration: no budget


def test_a_fast_dev_run_leaves_out_what_the_real_study_would(store_env):
    cal = cost.load_calibration(cost.DEFAULT_CALIBRATION)
    arts = registry.select("pnpp_table12_13_normsoftmax,pnpp_fig4c_proxy_lr")
    real = make_plan(arts, "paper", Execution(device="cpu"), datasets="cub", calibration=cal)
    first = sum(r.price.hours for r in real.runs if "pnpp_table12_13_normsoftmax" in r.artifacts)
    fast = make_plan(
        arts,
        "paper",
        Execution(device="cpu", fast_dev_run=2),
        datasets="cub",
        calibration=cal,
        max_gpu_hours=first,
    )
    assert [a.id for a in fast.artifacts] == [
        "pnpp_table12_13_normsoftmax"
    ] and "pnpp_fig4c_proxy_lr" in fast.left_out
    assert all(r.run.config.run.fast_dev_run == 2 for r in fast.runs)


def test_every_line_of_the_plan_fits_120_columns(store_env):
    cal = cost.load_calibration(cost.DEFAULT_CALIBRATION)
    arts = registry.select("pnpp_table3_6_sota,ps_table4_mlrc,pa_fig1_convergence,heated_table1_2_variants")
    for plan in (
        make_plan(registry.select(None), "quick", Execution(device="cpu"), calibration=cal),
        make_plan(
            arts, "paper", Execution(device="cpu"), calibration=cal, datasets="cub,sop", max_gpu_hours=300
        ),
    ):
        text = format_plan(plan, jobs=16, limit=400)
        assert max(len(line) for line in text.splitlines()) <= WIDTH == 120
        assert "artifacts / config" in text and len(plan.runs) > 40


def test_claims_say_which_datasets_they_were_judged_without():
    from dmllab.experiments.verdicts import missing_datasets, verdict_table

    art = registry.get("pnpp_table3_6_sota")
    rows = pd.DataFrame(
        [
            {
                "variant": v,
                "dataset": "cub",
                "seed": s,
                "metric": "R@1",
                "value": 60 + s + (v != "ProxyNCA"),
                "profile": "paper",
            }
            for v in ("ProxyNCA", "ProxyNCA++ [2048]")
            for s in range(3)
        ]
    )
    assert missing_datasets(art, rows, "paper") == ["cars", "sop", "inshop"]
    # rows of none of the listed datasets: a stand-in's rows (the offline benchmark for cub on quick)
    assert missing_datasets(art, rows, "quick") == []
    table = verdict_table(art, rows, "paper")
    assert all("judged without cars, sop, inshop" in why for why in table["why"])
    full = pd.concat([rows.assign(dataset=d) for d in ("cub", "cars", "sop", "inshop")])
    assert not any("judged without" in why for why in verdict_table(art, full, "paper")["why"])


@pytest.fixture
def gpu_machine(monkeypatch):
    """A machine with CUDA and 16 usable cores (nothing runs on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for module in (jobs, placement):
        monkeypatch.setattr(module, "usable_cores", lambda: 16)


def test_auto_on_a_gpu_machine_picks_the_faster_of_the_cpu_pool_and_gpu_workers(store_env, gpu_machine):
    arts = registry.select("pnpp_table3_6_sota")  # 5 seeds x its quick configs
    measured = Calibration("gpu.csv", "a GPU", quick_run_s={1: 19.2})
    plan, where = placement.plan_study(
        arts, "quick", Execution(device="auto"), jobs="auto", calibration=measured
    )
    assert (where.device, where.workers, where.threads) == ("cpu", 16, 1)
    assert {r.run.config.run.device for r in plan.runs} == {"cpu"}  # the committed runs' keys
    assert (
        where.line.startswith("placement: the CPU pool, 16 workers")
        and "faster than 1 GPU worker(s)" in where.line
    )
    assert plan.placement == where.line and where.line in " ".join(format_plan(plan).split())  # wrapped
    fast = Calibration("gpu.csv", "a GPU", quick_run_s={1: 19.2, 2: 10.0, 8: 0.5})  # 8 workers: 0.5 s per run
    plan, where = placement.plan_study(arts, "quick", Execution(device="auto"), jobs="auto", calibration=fast)
    assert (where.device, where.workers, where.threads) == ("cuda", 8, 2)
    assert {r.run.config.run.device for r in plan.runs} == {"cuda"}
    from dmllab.pipeline.plan_text import duration

    assert (
        f"8 GPU worker(s) on cuda (a GPU): about {duration(len(plan.missing) * 0.5)}" in where.line
        and "the CPU pool of 16 workers" in where.line
    )
    forced = placement.plan_study(arts, "quick", Execution(device="cuda"), jobs="auto", calibration=measured)[
        1
    ]
    assert (forced.device, forced.workers, forced.threads) == ("cuda", 1, 16)
    shared = placement.plan_study(arts, "quick", Execution(device="cuda"), jobs="4", calibration=measured)[1]
    assert (shared.workers, shared.threads) == (4, 4) and "(not measured)" in shared.line
    cpu = placement.plan_study(arts, "quick", Execution(device="cpu"), jobs="auto", calibration=fast)[1]
    assert (cpu.device, cpu.workers) == ("cpu", 16) and "(--device cpu)" in cpu.line
    paper = placement.plan_study(arts, "paper", Execution(device="auto"), jobs="auto", calibration=measured)[
        1
    ]
    assert paper.device == "cuda"  # no CPU rate for the paper profile
