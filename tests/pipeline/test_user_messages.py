"""What a user sees: in a notebook an error dmllab names is dmllab's one line (any other error keeps its traceback),
a long first-use build says what it builds and for about how long, and every command has a description."""

from __future__ import annotations

import argparse

import pytest

from dmllab import fileio


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    yield sh
    sh.set_custom_exc((), None)
    InteractiveShell.clear_instance()


def test_a_named_error_is_one_line_in_a_notebook(shell, capsys):
    shell.run_cell("import dmllab.pipeline.notebook as nb")
    capsys.readouterr()
    result = shell.run_cell('A = nb.setup({"profile": "smoke", "seedz": 3}, "pnpp_fig3_two_moons")')
    shown = capsys.readouterr().out
    assert isinstance(result.error_in_exec, ValueError)
    assert shown.startswith("dmllab: error: unknown parameter 'seedz' for notebook pnpp_fig3_two_moons")
    assert shown.count("\n") == 1 and "Traceback" not in shown and "%tb" in shown
    shell.run_cell('int("x")')  # not dmllab's: IPython's traceback as always
    shown = capsys.readouterr().out
    assert "Traceback" in shown and "invalid literal for int()" in shown and "dmllab: error" not in shown


def test_a_long_first_use_build_is_announced(capsys):
    fileio.first_use("rendering X", fileio.LONG_BUILD_S - 1)
    assert capsys.readouterr().err == ""  # short: nothing to say
    fileio.first_use("rendering X into /c", 150)
    assert capsys.readouterr().err == "dmllab: first use: rendering X into /c, once: about 2.5 min\n"


def test_rendering_estimates_the_whole_pool_after_its_first_class():
    from dmllab.data.synthetic import generate

    calls = []
    generate("main", image_size=16, num_classes=6, images_per_class=2, progress=False, estimate=calls.append)
    assert len(calls) == 1 and calls[0] > 0


def test_every_command_has_a_description_and_every_option_a_help():
    from dmllab.cli import build_parser

    def commands(parser, name):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    yield f"{name} {sub}", child
                    yield from commands(child, f"{name} {sub}")

    found = {"dmllab": build_parser(), **dict(commands(build_parser(), "dmllab"))}
    assert {"dmllab report", "dmllab data check", "dmllab train"} <= set(found)
    assert [name for name, p in found.items() if not (p.description or "").strip()] == []
    no_help = [
        f"{name} {action.option_strings[0] if action.option_strings else action.dest}"
        for name, p in found.items()
        for action in p._actions
        if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()
    ]
    assert no_help == []
