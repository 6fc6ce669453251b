"""Every snippet of the README runs: the python blocks in order (one namespace, their asserts checked), and
every `ubatch ...` command line of the bash blocks through the CLI entry point (exit code 0)."""
import os
import re
import shlex

import pytest

from ubatch.cli import main

# the README's quick start and `ubatch run` use Gemma 3 270M (the default model)
pytestmark = pytest.mark.realmodel

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def _blocks(lang: str) -> list:
    with open(README) as f:
        return re.findall(rf"```{lang}\n(.*?)```", f.read(), re.S)


def _commands() -> list:
    cmds = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("ubatch "):
                cmds.append(line)
    return cmds


def test_readme_has_snippets() -> None:
    assert len(_blocks("python")) >= 3 and len(_commands()) >= 4


def test_python_snippets_run_in_order() -> None:
    ns: dict = {}
    for k, block in enumerate(_blocks("python")):
        exec(compile(block, f"README.md python block {k}", "exec"), ns)


@pytest.mark.parametrize("cmd", _commands())
def test_cli_snippets_run(cmd: str, capsys) -> None:
    assert main(shlex.split(cmd)[1:]) in (0, None)
    out = capsys.readouterr().out
    assert out.strip(), f"{cmd!r} printed nothing"
