"""``dmllab train``, ``dmllab evaluate``, ``dmllab presets`` and ``dmllab pretrain``.

Expected user errors (a wrong ``--data-root``, an unknown ``--set`` key, an unknown method) are printed as
one clean message on stderr with exit status 2, never as a traceback (:func:`dmllab.cli.main` reports them).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _config_from_args(args: argparse.Namespace):
    from dmllab.training import apply_overrides, presets

    cfg = presets.get(args.method, args.dataset, args.profile)
    overrides = list(args.set or [])
    if args.data_root is not None:
        overrides.insert(0, f"data.root={args.data_root}")
    if getattr(args, "two_stage", None) is not None:
        overrides.append(f"run.two_stage={args.two_stage}")
    return apply_overrides(cfg, overrides)


def _one_seed(args: argparse.Namespace, cfg: Any) -> None:
    """One seed per run: ``--set run.seed=N`` that disagrees with ``--seed`` (0 unless given) raises ValueError,
    instead of one of them being used silently."""
    if any(o.split("=", 1)[0].strip() == "run.seed" for o in args.set or []) and cfg.run.seed != args.seed:
        raise ValueError(
            f"--seed {args.seed} and --set run.seed={cfg.run.seed} disagree: a run has one seed; give it once, "
            "with --seed"
        )


def _print_metrics(metrics: dict[str, float]) -> None:
    print("  ".join(f"{k} {100 * v:.2f}" for k, v in metrics.items()))


def _cmd_train_mlrc(args: argparse.Namespace, cfg: Any) -> int:
    """``--protocol mlrc``: :func:`dmllab.training.mlrc.run_mlrc` (each fold model a run of the run store)."""
    from dmllab.training.mlrc import MLRCSettings, run_mlrc
    from dmllab.validation import MAX_SIZE, check_int, check_number

    given = {name: getattr(args, name) for name in _MLRC_OPTIONS}
    opts = {name: (_MLRC_DEFAULTS[name] if v is None else v) for name, v in given.items()}
    for name in ("mlrc_folds", "mlrc_repetitions", "mlrc_batch_size", "mlrc_per_class", "mlrc_dim"):
        check_int(
            "--" + name.replace("_", "-"), opts[name], low=2 if name == "mlrc_folds" else 1, high=MAX_SIZE
        )
    check_number("--mlrc-lr", opts["mlrc_lr"], low=0.0, low_open=True, allow_none=True)
    if opts["mlrc_batch_size"] % opts["mlrc_per_class"]:
        raise ValueError(
            f"--mlrc-batch-size ({opts['mlrc_batch_size']}) must be a multiple of --mlrc-per-class "
            f"({opts['mlrc_per_class']})"
        )
    try:
        run_folds = (
            tuple(int(f) for f in opts["mlrc_run_folds"].split(",")) if opts["mlrc_run_folds"] else None
        )
    except ValueError:
        raise ValueError(
            f"--mlrc-run-folds must be comma-separated fold numbers, got {opts['mlrc_run_folds']!r}"
        ) from None
    settings = MLRCSettings(
        folds=opts["mlrc_folds"],
        run_folds=run_folds,
        repetitions=opts["mlrc_repetitions"],
        lr=opts["mlrc_lr"],
        batch_size=opts["mlrc_batch_size"],
        per_class=opts["mlrc_per_class"],
        embedding_dim=opts["mlrc_dim"],
    )
    res = run_mlrc(
        cfg, settings, seed=args.seed, progress=not args.quiet, force=bool(getattr(args, "force", False))
    )
    print(
        f"MLRC test ({len(res.folds_trained)} of {settings.folds} folds, {settings.repetitions} repetition(s), "
        f"{res.wall_time_s:.1f} s; mean and 95% CI half-width):"
    )
    print("  ".join(f"{k} {100 * v:.2f}+-{100 * res.ci95[k]:.2f}" for k, v in res.metrics.items()))
    return 0


# The --mlrc-* options of `dmllab train` and their defaults (None on the parser: an option given without
# --protocol mlrc is an error, since it would do nothing).
_MLRC_DEFAULTS = {
    "mlrc_folds": 4,
    "mlrc_run_folds": None,
    "mlrc_repetitions": 1,
    "mlrc_lr": None,
    "mlrc_batch_size": 32,
    "mlrc_per_class": 4,
    "mlrc_dim": 128,
}
_MLRC_OPTIONS = tuple(_MLRC_DEFAULTS)


def cmd_train(args: argparse.Namespace) -> int:
    from dmllab.profiles import resolve_device
    from dmllab.training import RunStore, config_hash, presets, run
    from dmllab.training.config import check_value
    from dmllab.training.presets import tuned as tuned_recipes

    check_value("run.seed", args.seed)
    given = [name for name in _MLRC_OPTIONS if getattr(args, name, None) is not None]
    if given and getattr(args, "protocol", "standard") != "mlrc":
        names = ", ".join("--" + n.replace("_", "-") for n in given)
        raise ValueError(f"{names} only act with --protocol mlrc; add it or drop them")
    cfg = _config_from_args(args)
    _one_seed(args, cfg)
    if cfg.run.device == "auto":  # resolved once, here: the run's key names the device it trains on
        cfg = cfg.replace("run.device", resolve_device("auto"))
    untuned = tuned_recipes.untuned(cfg)
    if untuned:  # the first line: the other methods of the profile run their tuned recipes
        print(f"UNTUNED: {untuned}")
    if getattr(args, "protocol", "standard") == "mlrc":
        return _cmd_train_mlrc(args, cfg)
    if not args.quiet:
        print(presets.describe(cfg))
        print(f"config {config_hash(cfg)} seed {args.seed}")
    result = run(cfg, seed=args.seed, store=RunStore(), progress=not args.quiet, force=args.force)
    src = "stored result" if result.cached else f"trained in {result.wall_time_s:.1f} s"
    print(f"test ({src}; best epoch {result.best_epoch}, lr drops {result.lr_drop_epochs}):")
    _print_metrics(result.metrics)
    if result.train_metrics:
        print(f"final model on its training split: R@1 {100 * result.train_metrics['R@1']:.2f}")
    print(f"run stored in {result.run_dir}")
    return 0


def _find_weights(target: Path) -> tuple[Any, Path]:
    """(config, weights file) for a run folder of the store or a checkpoint file."""
    from dmllab import paths
    from dmllab.fileio import set_aside
    from dmllab.training import ExperimentConfig
    from dmllab.training.protocol import load_checkpoint
    from dmllab.training.store import CorruptRunError, verify_final_model, verify_run_dir

    if target.is_dir():
        if not (target / "config.json").is_file():
            raise FileNotFoundError(f"{target} is not a stored run (no config.json)")
        # the run's key is its folder's parent name: no need to recompute it (nor to find its dataset); what is
        # read is checked against the run's record (config.json against its config hash, final.pt against its
        # checksum): a damaged run is set aside, to be trained again
        weights = paths.checkpoints_dir() / target.parent.name / target.name / "final.pt"
        try:
            _, config, _ = verify_run_dir(target)
            if weights.is_file():
                verify_final_model(target, weights)
        except CorruptRunError as err:
            aside = set_aside(target, str(err), then="train the run again (dmllab train ... or dmllab study)")
            where = f"; moved it to {aside}" if aside else ""
            raise CorruptRunError(
                f"{err}{where}; train the run again (dmllab train ... or dmllab study)"
            ) from None
        cfg = ExperimentConfig.from_dict(config)
        if not weights.is_file():
            raise FileNotFoundError(f"no final model for {target} at {weights} (checkpoints are not in git)")
        return cfg, weights
    if target.is_file():
        state = load_checkpoint(target, "model file")
        if "config" in state:
            return ExperimentConfig.from_dict(state["config"]), target
        raise ValueError(f"{target} holds no config; pass a run folder or a final.pt file")
    raise FileNotFoundError(f"no run folder or checkpoint at {target}")


def cmd_evaluate(args: argparse.Namespace) -> int:
    from dmllab.metrics import evaluate
    from dmllab.training import apply_overrides, load_model
    from dmllab.training.export import embed_split

    cfg, weights = _find_weights(Path(args.target))
    overrides = []
    if args.dataset:
        overrides.append(f"data.dataset={args.dataset}")
    if args.data_root:
        overrides.append(f"data.root={args.data_root}")
    cfg = apply_overrides(cfg, overrides + list(args.set or []))
    model = load_model(cfg, weights)
    r = cfg.run
    kw = dict(metrics=r.metrics, ks=r.ks, distance=r.distance)
    if args.split is None and cfg.data.query_split is not None:
        q, ql, _ = embed_split(model, cfg, cfg.data.query_split)
        g, gl, _ = embed_split(model, cfg, cfg.data.gallery_split)
        metrics = evaluate(q, ql, gallery=g, gallery_labels=gl, **kw)
    else:
        emb, lab, _ = embed_split(model, cfg, args.split or cfg.data.test_split)
        metrics = evaluate(emb, lab, **kw)
    _print_metrics(metrics)
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    from dmllab.training import presets

    methods = [args.method] if args.method else presets.list_methods()
    print(f"methods:  {', '.join(presets.list_methods())}")
    print(f"datasets: {', '.join(presets.list_datasets())}")
    print(f"profiles: {', '.join(presets.list_profiles())}")
    datasets = [args.dataset] if args.dataset else presets.list_datasets()
    profiles = [args.profile] if args.profile else presets.list_profiles()
    for m in methods:
        opts = presets.method_options(m)
        print(f"\n{m}  (options: {', '.join(opts) or 'none'})")
        for d in datasets:
            for p in profiles:
                print("  " + presets.describe(presets.get(m, d, p)))
    return 0


def cmd_pretrain(args: argparse.Namespace) -> int:
    import time

    from dmllab.training.pretrain import ensure_pretrained_smallcnn
    from dmllab.validation import MAX_SIZE, check_int

    check_int("--width", args.width, high=MAX_SIZE)
    check_int("--seed", args.seed, low=0)
    t0 = time.perf_counter()
    path = ensure_pretrained_smallcnn(
        width=args.width, progress=not args.quiet, force=args.force, seed=args.seed
    )
    print(
        f"pre-trained SmallCNN (width {args.width}, synthetic draw {args.seed}) at {path} "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    return 0


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train (or fetch from the run store) one preset run",
        description="Train one run of METHOD on DATASET with its preset for PROFILE (changed with --set), or read "
        "it from the run store (results/runs/) when it is stored, and print its test metrics. An interrupted run "
        "resumes from its last epoch checkpoint; --force trains it again.",
    )
    p.add_argument("--method", required=True, help="e.g. proxynca++, proxy_anchor, heated_softmax:HLN")
    p.add_argument("--dataset", required=True, help="cub, cars, sop, inshop, synthetic, digits")
    p.add_argument("--data-root", default=None, help="dataset folder (not needed for synthetic/digits)")
    p.add_argument(
        "--profile", default="quick", help="paper, quick or smoke (default quick, the embedded default)"
    )
    p.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override, e.g. loss.temperature=0.05")
    g = p.add_mutually_exclusive_group()
    stage = "default: the preset's run.two_stage"
    g.add_argument(
        "--two-stage",
        dest="two_stage",
        action="store_const",
        const=True,
        default=None,
        help=f"ProxyNCA++'s protocol: stage 1 on train picks the epochs, stage 2 retrains on trainval ({stage})",
    )
    g.add_argument(
        "--single-stage",
        dest="two_stage",
        action="store_const",
        const=False,
        help=f"one stage on the config's train split for all epochs, last model tested ({stage})",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--force", action="store_true", help="retrain even if the run is stored")
    p.add_argument(
        "--protocol",
        choices=("standard", "mlrc"),
        default="standard",
        help="standard (the config's two-/single-stage protocol) or mlrc (Musgrave et al. 2020: 4-fold CV, "
        "128-d RMSprop fold models, P@1/RP/MAP@R concatenated and separated)",
    )
    p.add_argument("--mlrc-folds", type=int, default=None, help="with --protocol mlrc: folds (4)")
    p.add_argument("--mlrc-run-folds", default=None, help="comma-separated folds to train (default all)")
    p.add_argument("--mlrc-repetitions", type=int, default=None, help="with --protocol mlrc: repetitions (1)")
    p.add_argument("--mlrc-lr", type=float, default=None, help="RMSprop lr (PS: 1e-6; default: the preset's)")
    p.add_argument("--mlrc-batch-size", type=int, default=None, help="MLRC: 32 (= 8 classes x 4)")
    p.add_argument("--mlrc-per-class", type=int, default=None, help="with --protocol mlrc: 4")
    p.add_argument("--mlrc-dim", type=int, default=None, help="per-fold embedding size (MLRC: 128)")
    p.set_defaults(func=cmd_train)


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``train``, ``evaluate``, ``presets`` and ``pretrain`` on the ``dmllab`` parser."""
    _add_train(sub)
    p = sub.add_parser(
        "evaluate",
        help="evaluate a stored run's final model or a checkpoint file",
        description="Embed the test split (or --split; In-Shop: query against gallery) with the final model of a "
        "stored run, or with a checkpoint file, and print the run's retrieval metrics. --dataset, --data-root "
        "and --set evaluate the same network on other data.",
    )
    p.add_argument("target", help="results/runs/<hash>/seed<k> folder or a final.pt file")
    p.add_argument("--dataset", default=None, help="evaluate on this dataset (default: the run's)")
    p.add_argument("--data-root", default=None, help="its folder (default: the run's)")
    p.add_argument(
        "--split", default=None, help="default: the config's test split (query/gallery for In-Shop)"
    )
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override the run's config, as train --set does"
    )
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "presets",
        help="list methods, datasets and profiles with key hyper-parameters",
        description="List the methods, datasets and profiles dmllab knows and, for each method (or --method) on "
        "each dataset and profile (or --dataset, --profile), the preset's key hyper-parameters and the method's "
        "options.",
    )
    p.add_argument("--method", default=None, help="only this method (default: every one)")
    p.add_argument("--dataset", default=None, help="only this dataset (default: every one)")
    p.add_argument("--profile", default=None, help="only this profile (default: every one)")
    p.set_defaults(func=cmd_presets)

    p = sub.add_parser(
        "pretrain",
        help="pre-train the quick profile's SmallCNN on the synthetic pool (cached)",
        description="Pre-train the SmallCNN trunk the quick profile fine-tunes (its stand-in for ImageNet "
        "weights) on the synthetic benchmark's pre-training classes, once: the weights are cached under "
        "DMLLAB_CACHE and reused while the pre-training config is unchanged (--force: again). A study and the run "
        "store do it first when a run needs it.",
    )
    p.add_argument("--width", type=int, default=16, help="SmallCNN width (the quick profile uses 16)")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the synthetic benchmark's draw whose pre-training pool it trains on (0)",
    )
    p.add_argument("--profile", default="quick", help="accepted for symmetry; the quick profile's CNN")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--force", action="store_true", help="pre-train again even if the weights are cached")
    p.set_defaults(func=cmd_pretrain)
