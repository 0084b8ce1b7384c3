"""The index benchmarks' command lines (``benchmarks.swap_model``, ``benchmarks.index_bench``) on the harness."""

from __future__ import annotations

import pytest


def test_swap_model_out_is_the_folder_and_the_committed_file_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    """``--out`` names the results folder (the harness's option); the pre-harness ``--out FILE`` form is
    refused with the flag to use instead, not turned into a folder named like the file."""
    from benchmarks.swap_model import main

    with pytest.raises(SystemExit) as exc:
        main(["--out", "docs/results/swap_model.json"])
    assert exc.value.code == 2
    assert "--json docs/results/swap_model.json" in capsys.readouterr().err
