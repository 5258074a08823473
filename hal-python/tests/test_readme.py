"""The example in hal-python's README runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has a python example"
    assert len(blocks[0].strip().splitlines()) == 5
    exec(compile(blocks[0], str(README), "exec"), {})
